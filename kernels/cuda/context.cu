// The CUDA context: device, stream, cuBLAS handle with its own workspace, a scratch
// buffer for partial sums, the last error; and the device memory helpers.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_common.cuh"

// cuBLAS picks no split-K reduction that needs more: with a fixed workspace the
// algorithm choice, hence the bits, depend on the shapes only.
#define BLAS_WORKSPACE_BYTES (32u << 20)

int ds_cu_fail(ds_cuda_ctx *ctx, const char *file, int line, const char *fmt, ...) {
    const char *base = strrchr(file, '/');
    int k = snprintf(ctx->err, sizeof ctx->err, "%s:%d: ", base ? base + 1 : file, line);
    if (k < 0 || (size_t)k >= sizeof ctx->err) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err + k, sizeof ctx->err - (size_t)k, fmt, ap);
    va_end(ap);
    return -1;
}

const char *ds_cu_blas_status(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "cuBLAS not initialised";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "cuBLAS invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "cuBLAS architecture mismatch";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "cuBLAS execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "cuBLAS internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "cuBLAS not supported";
    default: return "cuBLAS error";
    }
}

void *ds_cu_scratch(ds_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes) return ctx->scratch;
    cudaError_t e = cudaSuccess;
    if (ctx->pool) { // stream-ordered: kernels queued before still read the old buffer
        if (ctx->scratch) e = cudaFreeAsync(ctx->scratch, ctx->stream);
        ctx->scratch = NULL;
        ctx->scratch_bytes = 0;
        if (e == cudaSuccess)
            e = cudaMallocFromPoolAsync(&ctx->scratch, bytes, ctx->pool, ctx->stream);
    } else { // the old buffer may still be read by kernels in flight
        e = cudaStreamSynchronize(ctx->stream);
        if (e == cudaSuccess && ctx->scratch) e = cudaFree(ctx->scratch);
        ctx->scratch = NULL;
        ctx->scratch_bytes = 0;
        if (e == cudaSuccess) e = cudaMalloc(&ctx->scratch, bytes);
    }
    if (e != cudaSuccess) {
        ctx->scratch = NULL;
        cudaGetLastError(); // an allocation failure is not sticky: do not report it twice
        DS_CU_FAIL(ctx, "scratch of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    ctx->scratch_bytes = bytes;
    return ctx->scratch;
}

extern "C" ds_cuda_ctx *ds_cuda_ctx_create(int device, char *why, size_t why_len) {
    char tmp[256];
    int n = ds_gpu_count(tmp, sizeof tmp);
    if (n == 0) {
        if (why) snprintf(why, why_len, "no CUDA device: %s", tmp);
        return NULL;
    }
    if (device < 0 || device >= n) {
        if (why) snprintf(why, why_len, "CUDA device %d does not exist (%d visible)", device, n);
        return NULL;
    }
    ds_cuda_ctx *ctx = (ds_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) {
        if (why) snprintf(why, why_len, "out of host memory");
        return NULL;
    }
    ctx->device = device;
    const char *what = "cudaSetDevice";
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) {
        what = "cuBLAS workspace";
        e = cudaMalloc(&ctx->blas_ws, BLAS_WORKSPACE_BYTES);
    }
    if (e != cudaSuccess) {
        if (why) snprintf(why, why_len, "device %d: %s: %s", device, what, cudaGetErrorString(e));
        ds_cuda_ctx_free(ctx);
        return NULL;
    }
    ctx->blas_ws_bytes = BLAS_WORKSPACE_BYTES;
    cublasStatus_t s = cublasCreate(&ctx->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(ctx->blas, CUBLAS_DEFAULT_MATH);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetWorkspace(ctx->blas, ctx->blas_ws, ctx->blas_ws_bytes);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (why) snprintf(why, why_len, "device %d: cuBLAS setup: %s", device, ds_cu_blas_status(s));
        ds_cuda_ctx_free(ctx);
        return NULL;
    }
    return ctx;
}

extern "C" void ds_cuda_ctx_free(ds_cuda_ctx *ctx) {
    if (!ctx) return;
    cudaSetDevice(ctx->device);
    if (ctx->stream) cudaStreamSynchronize(ctx->stream);
    else cudaDeviceSynchronize();
    if (ctx->blas) cublasDestroy(ctx->blas);
    if (ctx->lt) cublasLtDestroy(ctx->lt);
    cudaFree(ctx->blas_ws);
    if (ctx->pool && ctx->scratch) {
        cudaFreeAsync(ctx->scratch, ctx->stream);
        cudaStreamSynchronize(ctx->stream);
    } else {
        cudaFree(ctx->scratch);
    }
    free(ctx);
}

extern "C" const char *ds_cuda_ctx_error(const ds_cuda_ctx *ctx) { return ctx->err; }

extern "C" int ds_cuda_ctx_set_stream(ds_cuda_ctx *ctx, void *stream) {
    // work still queued on the old stream may use the scratch buffer the new one reuses
    DS_CU_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
    ctx->stream = (cudaStream_t)stream;
    DS_CU_BLAS(ctx, cublasSetStream(ctx->blas, ctx->stream));
    // cublasSetStream resets the workspace to cuBLAS's pool: keep ours
    DS_CU_BLAS(ctx, cublasSetWorkspace(ctx->blas, ctx->blas_ws, ctx->blas_ws_bytes));
    return 0;
}

extern "C" void *ds_cuda_ctx_stream(const ds_cuda_ctx *ctx) { return (void *)ctx->stream; }

extern "C" int ds_cuda_ctx_set_tf32(ds_cuda_ctx *ctx, int on) {
    DS_CU_BLAS(ctx, cublasSetMathMode(ctx->blas, on ? CUBLAS_TF32_TENSOR_OP_MATH
                                                    : CUBLAS_DEFAULT_MATH));
    return 0;
}

extern "C" void *ds_cuda_ctx_cublas(ds_cuda_ctx *ctx) { return (void *)ctx->blas; }

// ---- memory ---------------------------------------------------------------------------
extern "C" int ds_cuda_malloc(ds_cuda_ctx *ctx, void **dptr, size_t bytes) {
    *dptr = NULL;
    cudaError_t e = cudaMalloc(dptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *dptr = NULL;
        return DS_CU_FAIL(ctx, "cudaMalloc(%zu bytes): %s", bytes, cudaGetErrorString(e));
    }
    return 0;
}

extern "C" void ds_cuda_free(ds_cuda_ctx *ctx, void *dptr) {
    (void)ctx;
    if (dptr) cudaFree(dptr);
}

extern "C" int ds_cuda_memset0(ds_cuda_ctx *ctx, void *dptr, size_t bytes) {
    if (bytes == 0) return 0;
    DS_CU_CHECK(ctx, cudaMemsetAsync(dptr, 0, bytes, ctx->stream));
    return 0;
}

static int copy_sync(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes,
                     cudaMemcpyKind kind) {
    if (bytes == 0) return 0;
    DS_CU_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, kind, ctx->stream));
    DS_CU_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
    return 0;
}

extern "C" int ds_cuda_to_device(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    return copy_sync(ctx, dst, src, bytes, cudaMemcpyHostToDevice);
}

extern "C" int ds_cuda_to_host(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    return copy_sync(ctx, dst, src, bytes, cudaMemcpyDeviceToHost);
}

extern "C" int ds_cuda_copy(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes) {
    if (bytes == 0) return 0;
    DS_CU_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream));
    return 0;
}

extern "C" int ds_cuda_sync(ds_cuda_ctx *ctx) {
    DS_CU_CHECK(ctx, cudaStreamSynchronize(ctx->stream));
    DS_CU_CHECK(ctx, cudaGetLastError());
    return 0;
}
