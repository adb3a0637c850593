// Device query for `dsrun --devices`: the first CUDA translation unit, so the CUDA path
// is compiled and linked in every build that has the toolkit. The version query lives in
// versions.cu: programs that never ask for it (the GPU tests) then do not load libnccl.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "kernels_cuda.h"
}

extern "C" int ds_cuda_device_count(char *why, size_t why_len) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        if (why) snprintf(why, why_len, "%s (cuda error %d)", cudaGetErrorString(rc), (int)rc);
        return 0;
    }
    return n;
}

extern "C" int ds_cuda_device_info(int i, ds_cuda_device *dev, char *why, size_t why_len) {
    cudaDeviceProp p;
    cudaError_t rc = cudaGetDeviceProperties(&p, i);
    if (rc != cudaSuccess) {
        if (why) snprintf(why, why_len, "device %d: %s", i, cudaGetErrorString(rc));
        return -1;
    }
    memset(dev, 0, sizeof *dev);
    dev->index = i;
    snprintf(dev->name, sizeof dev->name, "%s", p.name);
    dev->total_mem = p.totalGlobalMem;
    dev->cc_major = p.major;
    dev->cc_minor = p.minor;
    dev->multiprocessors = p.multiProcessorCount;
    return 0;
}
