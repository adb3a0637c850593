// Inside the cuda device (device_cuda.cu): its state, shared with the kernel table
// (kernel_table_cuda.cu), whose entries have no device argument and so find the
// process's one device here.
#ifndef DS_CUDA_DEVICE_CUH
#define DS_CUDA_DEVICE_CUH

#include <pthread.h>

#include "cuda_common.cuh"

extern "C" {
#include "device.h"
}

#define DS_CUDA_MAX_STREAMS 16

struct ds_cuda_device {
    ds_device dev;     // first: the ds_device * handed out points here
    ds_cuda_ctx *ctx;  // the compute stream, cuBLAS on it, scratch from the pool
    cudaMemPool_t pool;
    size_t total_mem;
    cudaStream_t streams[DS_CUDA_MAX_STREAMS]; // stream_new's, waited for by sync
    int nstreams;
    int lock_fd; // the flock that says this GPU is this job's rank's (-1: none)
    pthread_mutex_t mu; // guards what follows: the comm path may record errors too
    size_t in_use;      // bytes asked of alloc and not freed
    int failed;         // the first asynchronous error, reported by every later wait
    ds_err failure;
};

// The process's cuda device, or NULL before ds_device_cuda_open.
extern ds_cuda_device *ds_cu_the_device;

// Makes "cuda:N: <message>" the device's sticky error unless one is already there.
void ds_cu_device_fail(ds_cuda_device *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
