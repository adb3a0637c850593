// Library versions for `dsrun --devices`, apart from the device query so that only the
// programs that call this link NCCL.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

extern "C" {
#include "kernels_cuda.h"
}

extern "C" void ds_cuda_versions(int *cudart, int *cublas, int *nccl) {
    *cudart = 0;
    cudaRuntimeGetVersion(cudart);
    *cublas = CUBLAS_VERSION;
    *nccl = 0;
    ncclGetVersion(nccl);
}
