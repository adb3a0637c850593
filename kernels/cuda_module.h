/* The CUDA backend as dsrun reaches it: a shared module (libds_cuda.so: kernels/cuda and
 * runtime/comm/nccl) that dsrun loads when a rank opens a cuda device, from the directory
 * dsrun itself runs from. dsrun links none of CUDA, cuBLAS or NCCL, so it starts where
 * they are not installed, and no cpu rank, agent or script maps them.
 *
 * The module's entry point, ds_cuda_module_entry, gives the device (whose ops and kernel
 * table are the backend's); the NCCL communicator is its symbol ds_comm_nccl_open, which
 * runtime/comm asks for with ds_cuda_module_symbol once the device is open. Programs
 * linked with the backend itself (the static library ds_cuda: the GPU tests and
 * benchmarks) use their own copy instead, so a process never holds two. */
#ifndef DS_CUDA_MODULE_H
#define DS_CUDA_MODULE_H

#include <stddef.h>

#include "device.h"
#include "ds_err.h"

#define DS_CUDA_MODULE_FILE "libds_cuda.so"
/* Raised when the table below changes: a module left from another build is refused. */
#define DS_CUDA_MODULE_ABI 3

/* A module left beside a dsrun rebuilt from other sources is refused with a clear error
 * instead of being called through the wrong pointers. Two records, as each end was
 * compiled: the sizes of the structures they share by layout (a kernel-table entry or a
 * device op more, the usual change, named in the error) and DS_CUDA_INTERFACE, a hash of
 * every header they are both compiled against (kernels/cuda_interface.cmake: common/,
 * kernels/, runtime/comm/), which catches what keeps every size, a signature or the
 * communicator's structures. Two builds of the same sources agree. */
typedef struct ds_cuda_layout {
    size_t kernel_table, device_ops, device, err;
} ds_cuda_layout;

#define DS_CUDA_LAYOUT                                                                         \
    ((ds_cuda_layout){sizeof(ds_kernel_table), sizeof(ds_device_ops), sizeof(struct ds_device), \
                      sizeof(ds_err)})

/* What the module gives through its entry point. */
typedef struct ds_cuda_module {
    int abi;     /* DS_CUDA_MODULE_ABI */
    size_t size; /* sizeof(ds_cuda_module) */
    ds_cuda_layout layout; /* DS_CUDA_LAYOUT, as the module was compiled */
    char interface[17];    /* DS_CUDA_INTERFACE, as the module was compiled */
    ds_device *(*device_open)(int index, ds_err *err);     /* device.h's ds_device_cuda_open */
    void (*versions)(int *cudart, int *cublas, int *nccl); /* kernels_cuda.h */
} ds_cuda_module;

/* The backend, loaded on the first call (the linked copy when there is one). NULL with
 * err naming the module's path and the loader's reason when it cannot be loaded. */
const ds_cuda_module *ds_cuda_module_get(ds_err *err);
/* Another symbol of the loaded module, or NULL with err (the module not loaded by this
 * process, or without it). */
void *ds_cuda_module_symbol(const char *name, ds_err *err);
/* The module dsrun loads: DS_CUDA_MODULE_FILE beside the running executable. */
int ds_cuda_module_path(char *buf, size_t len, ds_err *err);

#endif
