// Pointwise kernels: grid-stride loops; the per-element math is kernel_math.h's.
#include "cuda_common.cuh"

#define GRID_STRIDE(i, n)                                                                  \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);               \
         i += (size_t)gridDim.x * blockDim.x)

__global__ static void add_k(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}
__global__ static void accumulate_k(float *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] += src[i];
}
__global__ static void scale_k(float *x, float s, size_t n) {
    GRID_STRIDE(i, n) x[i] *= s;
}
__global__ static void gelu_fwd_k(float *out, const float *inp, size_t n) {
    GRID_STRIDE(i, n) out[i] = ds_km_gelu_fwd(inp[i]);
}
__global__ static void gelu_bwd_k(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) dinp[i] += ds_km_gelu_grad(inp[i]) * dout[i];
}

#define LAUNCH(ctx, name, kernel, n, ...)                                                  \
    do {                                                                                   \
        if ((n) == 0) return 0;                                                            \
        kernel<<<ds_cu_blocks(n), DS_CU_THREADS, 0, (ctx)->stream>>>(__VA_ARGS__);         \
        DS_CU_LAUNCHED(ctx, name);                                                         \
        return 0;                                                                          \
    } while (0)

extern "C" int ds_cuda_add_forward(ds_cuda_ctx *ctx, float *out, const float *a, const float *b,
                                   size_t n) {
    DS_CU_ARG(ctx, n == 0 || (out && a && b));
    LAUNCH(ctx, "add", add_k, n, out, a, b, n);
}

extern "C" int ds_cuda_accumulate(ds_cuda_ctx *ctx, float *dst, const float *src, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (dst && src));
    LAUNCH(ctx, "accumulate", accumulate_k, n, dst, src, n);
}

extern "C" int ds_cuda_scale(ds_cuda_ctx *ctx, float *x, float s, size_t n) {
    DS_CU_ARG(ctx, n == 0 || x);
    LAUNCH(ctx, "scale", scale_k, n, x, s, n);
}

extern "C" int ds_cuda_gelu_forward(ds_cuda_ctx *ctx, float *out, const float *inp, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (out && inp));
    LAUNCH(ctx, "gelu forward", gelu_fwd_k, n, out, inp, n);
}

extern "C" int ds_cuda_gelu_backward(ds_cuda_ctx *ctx, float *dinp, const float *inp,
                                     const float *dout, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (dinp && inp && dout));
    LAUNCH(ctx, "gelu backward", gelu_bwd_k, n, dinp, inp, dout, n);
}
