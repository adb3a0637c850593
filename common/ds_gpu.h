/* Which CUDA devices this machine has: asked by dslaunch (how many slots a node without
 * a hostfile has) and by dsrun (--devices, device = auto). Answers 0 devices, with the
 * reason, on a machine without a GPU or driver and in a build without CUDA. It asks the
 * CUDA driver (libcuda.so.1, opened on first use), never the CUDA runtime: the programs
 * that ask link no CUDA library. */
#ifndef DS_GPU_H
#define DS_GPU_H

#include <stddef.h>

typedef struct ds_gpu {
    int index;
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int multiprocessors;
} ds_gpu;

/* Number of visible devices; 0 with why filled when there is none (why may be NULL). */
int ds_gpu_count(char *why, size_t why_len);
/* Fills g for device i; 0, or -1 with why filled. */
int ds_gpu_info(int i, ds_gpu *g, char *why, size_t why_len);

#endif
