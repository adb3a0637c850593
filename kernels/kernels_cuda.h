/* CUDA side of the kernels, callable from C. Compiled only when nvcc is found
 * (DS_HAVE_CUDA); callers guard with #ifdef DS_HAVE_CUDA. */
#ifndef DS_KERNELS_CUDA_H
#define DS_KERNELS_CUDA_H

#include <stddef.h>

typedef struct ds_cuda_device {
    int index;
    char name[256];
    size_t total_mem;
    int cc_major, cc_minor;
    int multiprocessors;
} ds_cuda_device;

/* Number of visible CUDA devices; 0 with *why filled when there is no driver/device
 * (cudaGetDeviceCount error 35 on a machine without a GPU). */
int ds_cuda_device_count(char *why, size_t why_len);
/* Fills dev for device i; returns 0, or -1 with *why filled. */
int ds_cuda_device_info(int i, ds_cuda_device *dev, char *why, size_t why_len);
/* Versions the binary was built against and runs with (runtime API, cuBLAS, NCCL). */
void ds_cuda_versions(int *cudart, int *cublas, int *nccl);

#endif
