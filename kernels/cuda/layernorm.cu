// LayerNorm: one warp per row (lanes stride the columns, then a fixed butterfly), two
// passes for the variance as on the CPU. dweight/dbias are column sums over rows: the
// deterministic two-phase ds_cu_colsum2.
#include "cuda_common.cuh"

#define ROWS_PER_BLOCK 8

__global__ static void forward_k(float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int N, int C,
                                 float eps) {
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
    float *y = out + (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        y[i] = ds_km_layernorm1(x[i], m, r, weight ? weight[i] : 1.0f, bias ? bias[i] : 0.0f);
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
    forward_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(out, mean, rstd, inp, weight,
                                                               bias, N, C, eps);
    DS_CU_LAUNCHED(ctx, "layernorm forward");
    return 0;
}

__global__ static void dinp_k(float *dinp, const float *dout, const float *inp,
                              const float *weight, const float *mean, const float *rstd, int N,
                              int C) {
    int lane = threadIdx.x & 31;
    int n = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (n >= N) return;
    const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float a1 = 0.0f, a2 = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float dn = (weight ? weight[i] : 1.0f) * dy[i];
        a1 += dn;
        a2 += dn * (x[i] - m) * s;
    }
    float dnorm_mean = ds_cu_warp_sum(a1) / C, dnorm_norm_mean = ds_cu_warp_sum(a2) / C;
    float *dx = dinp + (size_t)n * C;
    for (int i = lane; i < C; i += 32)
        dx[i] += ds_km_layernorm_dx1(x[i], dy[i], weight ? weight[i] : 1.0f, m, s, dnorm_mean,
                                     dnorm_norm_mean);
}

struct ln_param_grads {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ float2 operator()(int n, int c) const {
        size_t i = (size_t)n * C + c;
        return make_float2((inp[i] - mean[n]) * rstd[n] * dout[i], dout[i]);
    }
};

extern "C" int ds_cuda_layernorm_backward(ds_cuda_ctx *ctx, float *dinp, float *dweight,
                                          float *dbias, const float *dout, const float *inp,
                                          const float *weight, const float *mean,
                                          const float *rstd, int N, int C) {
    DS_CU_ARG(ctx, dout && inp && mean && rstd && N > 0 && C > 0);
    if (dinp) {
        int blocks = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
        dinp_k<<<blocks, 32 * ROWS_PER_BLOCK, 0, ctx->stream>>>(dinp, dout, inp, weight, mean,
                                                                rstd, N, C);
        DS_CU_LAUNCHED(ctx, "layernorm backward");
    }
    if (dweight || dbias)
        return ds_cu_colsum2(ctx, dweight, dbias, N, C, ln_param_grads{dout, inp, mean, rstd, C});
    return 0;
}
