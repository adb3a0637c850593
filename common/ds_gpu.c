#include "ds_gpu.h"

#include <stdio.h>
#include <string.h>

#ifdef DS_HAVE_CUDA
#include <cuda_runtime_api.h>

int ds_gpu_count(char *why, size_t why_len) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (why) snprintf(why, why_len, "%s (cuda error %d)", cudaGetErrorString(rc), (int)rc);
        return 0;
    }
    if (n == 0 && why) snprintf(why, why_len, "none visible");
    return n;
}

int ds_gpu_info(int i, ds_gpu *g, char *why, size_t why_len) {
    struct cudaDeviceProp p;
    cudaError_t rc = cudaGetDeviceProperties(&p, i);
    if (rc != cudaSuccess) {
        if (why) snprintf(why, why_len, "device %d: %s", i, cudaGetErrorString(rc));
        return -1;
    }
    memset(g, 0, sizeof *g);
    g->index = i;
    snprintf(g->name, sizeof g->name, "%s", p.name);
    g->total_mem = p.totalGlobalMem;
    g->cc_major = p.major;
    g->cc_minor = p.minor;
    g->multiprocessors = p.multiProcessorCount;
    return 0;
}

#else

int ds_gpu_count(char *why, size_t why_len) {
    if (why) snprintf(why, why_len, "built without CUDA");
    return 0;
}

int ds_gpu_info(int i, ds_gpu *g, char *why, size_t why_len) {
    (void)g;
    if (why) snprintf(why, why_len, "device %d: built without CUDA", i);
    return -1;
}

#endif
