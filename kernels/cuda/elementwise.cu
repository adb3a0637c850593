// Pointwise kernels: grid-stride loops; the per-element math is kernel_math.h's. GELU
// reads and writes 16-bit activations as they are (ds_cu_act), fp32 in between.
#include "cuda_common.cuh"
#include "half_math.cuh"

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
__global__ static void gelu_bwd_k(float *dinp, int acc, const float *inp, const float *dout,
                                  size_t n) {
    GRID_STRIDE(i, n) ds_cu_grad(dinp + i, ds_km_gelu_grad(inp[i]) * dout[i], acc);
}
__global__ static void gelu16_fwd_k(ds_cu_act out, ds_cu_act inp, size_t n) {
    GRID_STRIDE(i, n) out.store(i, ds_km_gelu_fwd(inp.load(i)));
}
__global__ static void gelu16_bwd_k(ds_cu_act dinp, int acc, ds_cu_act inp, const float *dout,
                                    size_t n) {
    GRID_STRIDE(i, n) ds_cu_grad_act(dinp, i, ds_km_gelu_grad(inp.load(i)) * dout[i], acc);
}

extern "C" int ds_cuda_add_forward(ds_cuda_ctx *ctx, float *out, const float *a, const float *b,
                                   size_t n) {
    DS_CU_ARG(ctx, n == 0 || (out && a && b));
    DS_CU_LAUNCH_N(ctx, "add", add_k, n, out, a, b, n);
}

extern "C" int ds_cuda_accumulate(ds_cuda_ctx *ctx, float *dst, const float *src, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (dst && src));
    DS_CU_LAUNCH_N(ctx, "accumulate", accumulate_k, n, dst, src, n);
}

extern "C" int ds_cuda_scale(ds_cuda_ctx *ctx, float *x, float s, size_t n) {
    DS_CU_ARG(ctx, n == 0 || x);
    DS_CU_LAUNCH_N(ctx, "scale", scale_k, n, x, s, n);
}

extern "C" int ds_cuda_gelu_forward(ds_cuda_ctx *ctx, float *out, const float *inp, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (out && inp));
    DS_CU_LAUNCH_N(ctx, "gelu forward", gelu_fwd_k, n, out, inp, n);
}

extern "C" int ds_cuda_gelu_backward(ds_cuda_ctx *ctx, float *dinp, int acc, const float *inp,
                                     const float *dout, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (dinp && inp && dout));
    DS_CU_LAUNCH_N(ctx, "gelu backward", gelu_bwd_k, n, dinp, acc, inp, dout, n);
}

extern "C" int ds_cuda_gelu16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, const void *inp,
                                      size_t n, int in16, int out16) {
    DS_CU_ARG(ctx, n == 0 || (out && inp));
    DS_CU_LAUNCH_N(ctx, "gelu16 forward", gelu16_fwd_k, n, ds_cu_act_of(out, out16, h),
                   ds_cu_act_of(inp, in16, h), n);
}

extern "C" int ds_cuda_gelu16_backward(ds_cuda_ctx *ctx, ds_half h, void *dinp, int acc,
                                       const uint16_t *inp, const float *dout, size_t n,
                                       int din16) {
    DS_CU_ARG(ctx, n == 0 || (dinp && inp && dout));
    DS_CU_LAUNCH_N(ctx, "gelu16 backward", gelu16_bwd_k, n, ds_cu_act_of(dinp, din16, h), acc,
                   ds_cu_act_of(inp, 1, h), dout, n);
}
