// Optimizer steps (kernel_math.h's element updates) and the sum of squares: fixed chunks
// of SUMSQ_CHUNK elements, each summed by one block (strided lanes, then a fixed tree),
// then the chunk sums by one block in the same way. The order depends on n only.
#include "cuda_common.cuh"

#define SUMSQ_CHUNK 16384
#define SUMSQ_THREADS 256

__global__ static void adamw_k(float *param, const float *grad, float *m, float *v, size_t n,
                               ds_km_adamw k) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ds_km_adamw1(&param[i], grad[i], &m[i], &v[i], &k);
}

__global__ static void sgd_k(float *param, const float *grad, float *buf, size_t n, float lr,
                             float momentum, float weight_decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ds_km_sgd1(&param[i], grad[i], buf ? &buf[i] : NULL, lr, momentum, weight_decay);
}

extern "C" int ds_cuda_adamw_update_scaled(ds_cuda_ctx *ctx, float *param, const float *grad,
                                           float grad_scale, float *m, float *v, size_t n,
                                           float lr, float beta1, float beta2, float eps,
                                           float weight_decay, int t) {
    DS_CU_ARG(ctx, n == 0 || (param && grad && m && v));
    DS_CU_ARG(ctx, t >= 1);
    if (n == 0) return 0;
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    adamw_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(param, grad, m, v, n, k);
    DS_CU_LAUNCHED(ctx, "adamw");
    return 0;
}

extern "C" int ds_cuda_adamw_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2,
                                    float eps, float weight_decay, int t) {
    return ds_cuda_adamw_update_scaled(ctx, param, grad, 1.0f, m, v, n, lr, beta1, beta2, eps,
                                       weight_decay, t);
}

extern "C" int ds_cuda_sgd_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *buf,
                                  size_t n, float lr, float momentum, float weight_decay) {
    DS_CU_ARG(ctx, n == 0 || (param && grad));
    DS_CU_ARG(ctx, momentum == 0.0f || buf);
    if (n == 0) return 0;
    sgd_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(param, grad, buf, n, lr, momentum,
                                                              weight_decay);
    DS_CU_LAUNCHED(ctx, "sgd");
    return 0;
}

__global__ static void sumsq_chunks_k(double *partial, const float *x, size_t n) {
    __shared__ double sh[32];
    size_t lo = (size_t)blockIdx.x * SUMSQ_CHUNK;
    size_t hi = lo + SUMSQ_CHUNK < n ? lo + SUMSQ_CHUNK : n;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += SUMSQ_THREADS) acc += (double)x[i] * x[i];
    acc = ds_cu_block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ static void sum_partials_k(double *out, const double *partial, size_t count) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < count; i += SUMSQ_THREADS) acc += partial[i];
    acc = ds_cu_block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

extern "C" int ds_cuda_sumsq(ds_cuda_ctx *ctx, const float *x, size_t n, double *dev_out) {
    DS_CU_ARG(ctx, dev_out && (n == 0 || x));
    size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    DS_CU_ARG(ctx, chunks <= 0x7FFFFFFF);
    if (chunks == 0) {
        DS_CU_CHECK(ctx, cudaMemsetAsync(dev_out, 0, sizeof(double), ctx->stream));
        return 0;
    }
    double *partial = (double *)ds_cu_scratch(ctx, chunks * sizeof(double));
    if (!partial) return -1;
    sumsq_chunks_k<<<(unsigned)chunks, SUMSQ_THREADS, 0, ctx->stream>>>(partial, x, n);
    DS_CU_LAUNCHED(ctx, "sumsq chunks");
    sum_partials_k<<<1, SUMSQ_THREADS, 0, ctx->stream>>>(dev_out, partial, chunks);
    DS_CU_LAUNCHED(ctx, "sumsq total");
    return 0;
}

extern "C" int ds_cuda_sumsq_host(ds_cuda_ctx *ctx, const float *x, size_t n, double *out) {
    DS_CU_ARG(ctx, out);
    // the result goes after the chunk partials in one scratch buffer
    size_t chunks = (n + SUMSQ_CHUNK - 1) / SUMSQ_CHUNK;
    if (!ds_cu_scratch(ctx, (chunks + 1) * sizeof(double))) return -1;
    double *res = (double *)ctx->scratch + chunks;
    // ds_cuda_sumsq asks for chunks doubles only: the buffer is already large enough
    if (ds_cuda_sumsq(ctx, x, n, res) != 0) return -1;
    return ds_cuda_to_host(ctx, out, res, sizeof(double));
}
