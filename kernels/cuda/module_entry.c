/* The CUDA backend's entry point (kernels/cuda_module.h): what dsrun looks up after
 * loading libds_cuda.so, and what a program linked with the backend uses directly. */
#include "cuda_module.h"
#include "ds_cuda_interface.h"
#include "kernels_cuda.h"

static const ds_cuda_module MODULE = {
    .abi = DS_CUDA_MODULE_ABI,
    .size = sizeof(ds_cuda_module),
    .layout = DS_CUDA_LAYOUT,
    .interface = DS_CUDA_INTERFACE,
    .device_open = ds_device_cuda_open,
    .versions = ds_cuda_versions,
};

/* The module's objects are built with hidden visibility: this, and the NCCL open, are
 * all it exports. */
__attribute__((visibility("default"))) const ds_cuda_module *ds_cuda_module_entry(void) {
    return &MODULE;
}
