/* A small harness for the GPU test programs: each compares ds_cuda_* kernels with their
 * CPU twins (ds_kernels) on random inputs and exits 0 (pass), 1 (fail) or 77 (no device:
 * ctest's SKIP_RETURN_CODE). Data go to the device with gh_up and come back with
 * gh_down; a failing CUDA call ends the program with its message. */
#ifndef DS_GPU_HARNESS_H
#define DS_GPU_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "ds_gpu.h"
#include "kernels_cuda.h"

#define GH_SKIP 77

typedef struct gh {
    const char *prog;
    ds_cuda_ctx *ctx; /* gh_init's; with gh_init_device, the device's */
    ds_device *dev;   /* gh_init_device's: the process's cuda device */
    uint64_t rng;
    int checks, failures;
} gh;

/* Creates the context on device 0, or exits 77 with the reason when there is none. */
void gh_init(gh *g, const char *prog);
/* Opens cuda:0 as the process's device (ds_device_open), or exits 77 without a GPU;
 * gh_dev_* then move data through its ops. */
void gh_init_device(gh *g, const char *prog);
void *gh_dev_up(gh *g, const void *host, size_t bytes);
void *gh_dev_zeros(gh *g, size_t bytes);
void gh_dev_down(gh *g, void *host, const void *dev, size_t bytes);
void gh_dev_free(gh *g, void *dev, size_t bytes);
/* Prints the summary, frees the context; returns the exit status. */
int gh_finish(gh *g);

/* Host buffers (exit on allocation failure). */
void *gh_alloc(size_t bytes);
float *gh_randf(gh *g, size_t n, float lo, float hi);
float *gh_copyf(const float *src, size_t n);
/* Device buffers: gh_up copies host data; gh_zeros is zero-filled. */
void *gh_up(gh *g, const void *host, size_t bytes);
void *gh_zeros(gh *g, size_t bytes);
void gh_down(gh *g, void *host, const void *dev, size_t bytes);
float *gh_downf(gh *g, const float *dev, size_t n); /* new host copy */
uint32_t gh_rand_u32(gh *g);

/* Records one check: |gpu - cpu| <= atol + rtol * |cpu| for every element (NaN never
 * matches). Prints the worst element either way. */
void gh_close(gh *g, const char *what, const float *gpu, const float *cpu, size_t n, float atol,
              float rtol);
/* Records one check: the same bytes. */
void gh_same_bits(gh *g, const char *what, const void *a, const void *b, size_t bytes);
void gh_expect(gh *g, const char *what, int ok);

/* Any ds_cuda_* call: a non-zero return ends the program with the context's error. */
#define GH_OK(g, call) gh_ok_((g), (call), #call, __FILE__, __LINE__)
void gh_ok_(gh *g, int rc, const char *call, const char *file, int line);

#endif
