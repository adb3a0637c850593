// LayerNorm: one warp per row (lanes stride the columns, then a fixed butterfly), two
// passes for the variance as on the CPU. dweight/dbias are column sums over rows: the
// deterministic two-phase ds_cu_colsum2. The kernels read the weight and bias through a
// loader, so a 16-bit stage's LayerNorm reads its bf16/fp16 parameters as they are, and
// may write a 16-bit output directly.
#include "cuda_common.cuh"
#include "half_math.cuh"
#include "kernel_table.h" // ds_layernorm16_workspace's layout

// an fp32 parameter (NULL: the default) or a 16-bit one, widened where it is read
struct ln_f32 {
    const float *p;
    __device__ float operator()(int i, float dflt) const { return p ? p[i] : dflt; }
};
struct ln_half {
    const uint16_t *p;
    ds_half h;
    __device__ float operator()(int i, float dflt) const {
        return p ? ds_cu_widen(h, p[i]) : dflt;
    }
};

#define ROWS_PER_BLOCK 8

// out: fp32, or 16-bit (a 16-bit stage's LayerNorm feeding a layer that takes it), each
// value rounded once as it is stored
template <typename W>
__global__ static void forward_k(ds_cu_act out, float *mean, float *rstd, const float *inp,
                                 W weight, W bias, int N, int C, float eps) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (n >= N) return; // whole warps leave together: the shuffles below stay full
    const float *x = inp + (size_t)n * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += x[i];
    float m = ds_cu_warp_sum(s) / C;
    float v = 0.0f;
    for (int i = lane; i < C; i += 32) v += (x[i] - m) * (x[i] - m);
    v = ds_cu_warp_sum(v) / C;
    float r = 1.0f / __fsqrt_rn(v + eps);
    size_t y = (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        out.store(y + i, ds_km_layernorm1(x[i], m, r, weight(i, 1.0f), bias(i, 0.0f)));
    if (lane == 0) {
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

extern "C" int ds_cuda_layernorm_forward(ds_cuda_ctx *ctx, float *out, float *mean, float *rstd,
                                         const float *inp, const float *weight,
                                         const float *bias, int N, int C, float eps) {
    DS_CU_ARG(ctx, out && inp && N > 0 && C > 0);
    int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    forward_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(ds_cu_f32(out), mean, rstd, inp,
                                                               ln_f32{weight}, ln_f32{bias}, N,
                                                               C, eps);
    DS_CU_LAUNCHED(ctx, "layernorm forward");
    return 0;
}

extern "C" int ds_cuda_layernorm16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, float *mean,
                                           float *rstd, const float *inp,
                                           const uint16_t *weight, const uint16_t *bias, int N,
                                           int C, float eps, int out16) {
    DS_CU_ARG(ctx, out && inp && weight && bias && N > 0 && C > 0);
    int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    forward_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
        ds_cu_act_of(out, out16, h), mean, rstd, inp, ln_half{weight, h}, ln_half{bias, h}, N,
        C, eps);
    DS_CU_LAUNCHED(ctx, "layernorm16 forward");
    return 0;
}

template <typename W>
__global__ static void dinp_k(float *dinp, int acc, const float *dout, const float *inp, W weight,
                              const float *mean, const float *rstd, int N, int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float a1 = 0.0f, a2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = weight(i, 1.0f) * dy[i];
        a1 += dn;
        a2 += dn * (x[i] - m) * s;
    }
    float dnorm_mean = ds_cu_warp_sum(a1) / C, dnorm_norm_mean = ds_cu_warp_sum(a2) / C;
    float *dx = dinp + (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        ds_cu_grad(
            dx + i,
            ds_km_layernorm_dx1(x[i], dy[i], weight(i, 1.0f), m, s, dnorm_mean, dnorm_norm_mean),
            acc);
}

struct ln_param_grads {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return make_float2((inp[i] - mean[n]) * rstd[n] * dout[i], dout[i]);
    }
};

extern "C" int ds_cuda_layernorm_backward(ds_cuda_ctx *ctx, float *dinp, int acc, float *dweight,
                                          float *dbias, const float *dout, const float *inp,
                                          const float *weight, const float *mean, const float *rstd,
                                          int N, int C) {
    DS_CU_ARG(ctx, dout && inp && mean && rstd && N > 0 && C > 0);
    if (dinp) {
        int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
        dinp_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(dinp, acc, dout, inp,
                                                                ln_f32{weight}, mean, rstd, N, C);
        DS_CU_LAUNCHED(ctx, "layernorm backward");
    }
    if (dweight || dbias)
        return ds_cu_colsum2(ctx, dweight, dbias, N, C, ln_param_grads{dout, inp, mean, rstd, C});
    return 0;
}

// dweight and dbias summed in fp32 in ws (the layout of ds_layernorm16_workspace: the
// widened weight's part is not used here), then added with one rounding.
extern "C" int ds_cuda_layernorm16_backward(ds_cuda_ctx *ctx, ds_half h, float *dinp, int acc,
                                            uint16_t *dweight, uint16_t *dbias, const float *dout,
                                            const float *inp, const uint16_t *weight,
                                            const float *mean, const float *rstd, int N, int C,
                                            void *ws) {
    DS_CU_ARG(ctx, dout && inp && weight && mean && rstd && ws && N > 0 && C > 0);
    if (dinp) {
        int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
        dinp_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(
            dinp, acc, dout, inp, ln_half{weight, h}, mean, rstd, N, C);
        DS_CU_LAUNCHED(ctx, "layernorm16 backward");
    }
    if (!dweight && !dbias) return 0;
    size_t part = ds_ws_part((size_t)C * 4);
    float *dw = (float *)((char *)ws + part), *db = (float *)((char *)ws + 2 * part);
    DS_CU_CHECK(ctx, cudaMemsetAsync(dw, 0, 2 * part, ctx->stream));
    if (ds_cu_colsum2(ctx, dweight ? dw : NULL, dbias ? db : NULL, N, C,
                      ln_param_grads{dout, inp, mean, rstd, C}) != 0)
        return -1;
    if (dweight && ds_cuda_half_acc_f32(ctx, h, dweight, dw, (size_t)C) != 0) return -1;
    if (dbias && ds_cuda_half_acc_f32(ctx, h, dbias, db, (size_t)C) != 0) return -1;
    return 0;
}
