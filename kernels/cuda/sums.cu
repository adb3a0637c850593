// Sums into a device double in a fixed order: fixed chunks of SUM_CHUNK elements, each
// summed by one block (strided lanes, then a fixed tree), then the chunk sums by one
// block in the same way. The order depends on n only: no atomics, the same bits every
// call. Sums of squares (the gradient norm; on 16-bit arrays inf or NaN anywhere makes
// it non-finite: the fp16 overflow check) and plain sums (the loss).
#include "cuda_common.cuh"
#include "half_math.cuh"

#define SUM_CHUNK 16384
#define SUM_THREADS 256

struct sq_f32 {
    const float *x;
    __device__ double operator()(size_t i) const { return (double)x[i] * x[i]; }
};
struct plain_f32 {
    const float *x;
    __device__ double operator()(size_t i) const { return (double)x[i]; }
};
struct sq_half {
    const uint16_t *x;
    ds_half h;
    __device__ double operator()(size_t i) const {
        double v = ds_cu_widen(h, x[i]);
        return v * v;
    }
};

template <typename F> __global__ void chunks_k(double *partial, size_t n, F f) {
    __shared__ double sh[32];
    size_t lo = (size_t)blockIdx.x * SUM_CHUNK;
    size_t hi = lo + SUM_CHUNK < n ? lo + SUM_CHUNK : n;
    double acc = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += SUM_THREADS) acc += f(i);
    acc = ds_cu_block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ static void sum_partials_k(double *out, const double *partial, size_t count) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < count; i += SUM_THREADS) acc += partial[i];
    acc = ds_cu_block_sum(acc, sh);
    if (threadIdx.x == 0) *out = acc;
}

template <typename F> static int sum_of(ds_cuda_ctx *ctx, size_t n, double *dev_out, F f) {
    size_t chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    DS_CU_ARG(ctx, chunks <= 0x7FFFFFFF);
    if (chunks == 0) {
        DS_CU_CHECK(ctx, cudaMemsetAsync(dev_out, 0, sizeof(double), ctx->stream));
        return 0;
    }
    double *partial = (double *)ds_cu_scratch(ctx, chunks * sizeof(double));
    if (!partial) return -1;
    chunks_k<<<(unsigned)chunks, SUM_THREADS, 0, ctx->stream>>>(partial, n, f);
    DS_CU_LAUNCHED(ctx, "sum chunks");
    sum_partials_k<<<1, SUM_THREADS, 0, ctx->stream>>>(dev_out, partial, chunks);
    DS_CU_LAUNCHED(ctx, "sum total");
    return 0;
}

extern "C" int ds_cuda_sumsq(ds_cuda_ctx *ctx, const float *x, size_t n, double *dev_out) {
    DS_CU_ARG(ctx, dev_out && (n == 0 || x));
    return sum_of(ctx, n, dev_out, sq_f32{x});
}

extern "C" int ds_cuda_sum(ds_cuda_ctx *ctx, const float *x, size_t n, double *dev_out) {
    DS_CU_ARG(ctx, dev_out && (n == 0 || x));
    return sum_of(ctx, n, dev_out, plain_f32{x});
}

extern "C" int ds_cuda_half_sumsq(ds_cuda_ctx *ctx, ds_half h, const uint16_t *x, size_t n,
                                  double *dev_out) {
    DS_CU_ARG(ctx, dev_out && (n == 0 || x));
    return sum_of(ctx, n, dev_out, sq_half{x, h});
}

extern "C" int ds_cuda_sumsq_host(ds_cuda_ctx *ctx, const float *x, size_t n, double *out) {
    DS_CU_ARG(ctx, out);
    // the result goes after the chunk partials in one scratch buffer
    size_t chunks = (n + SUM_CHUNK - 1) / SUM_CHUNK;
    if (!ds_cu_scratch(ctx, (chunks + 1) * sizeof(double))) return -1;
    double *res = (double *)ctx->scratch + chunks;
    // ds_cuda_sumsq asks for chunks doubles only: the buffer is already large enough
    if (ds_cuda_sumsq(ctx, x, n, res) != 0) return -1;
    return ds_cuda_to_host(ctx, out, res, sizeof(double));
}
