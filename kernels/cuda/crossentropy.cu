// Softmax cross-entropy: one block per row (max, then the sum of exponentials, each a
// fixed block reduction), exponentials from kernel_math.h. The total is summed on the
// host in row order from the copied losses, as the CPU kernel sums them.
#include <stdlib.h>

#include "cuda_common.cuh"
#include "half_math.cuh"

#define CE_THREADS 512

struct row_stats {
    float max, sum; // sum of exp(x - max)
};

// a row read as x[i]: fp32 logits (a pointer), or 16-bit ones widened (half_row)
template <typename Row> __device__ static row_stats row_stats_of(Row x, int V, float *sh) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, x[i]);
    m = ds_cu_block_max(m, sh, -INFINITY);
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += ds_km_expf(x[i] - m);
    s = ds_cu_block_sum(s, sh);
    return row_stats{m, s};
}

__global__ static void forward_k(float *losses, const float *logits, const int32_t *targets,
                                 int V) {
    __shared__ float sh[32];
    int n = blockIdx.x, tg = targets[n];
    if (tg < 0) {
        if (threadIdx.x == 0) losses[n] = 0.0f;
        return;
    }
    const float *x = logits + (size_t)n * V;
    row_stats st = row_stats_of(x, V, sh);
    if (threadIdx.x == 0) losses[n] = st.max + logf(st.sum) - x[tg];
}

// The gradient of one row, written (=) over dx, which may be x: every read of the row for
// its statistics happens before the block reductions' barriers, and afterwards each
// element is read and written by the same thread. Forward-backward runs the same
// arithmetic as backward, so the two give the same gradient.
__device__ static void row_grad(float *dx, const float *x, float lse, int tg, float dloss,
                                int V) {
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float g = dloss * ds_km_expf(x[i] - lse);
        dx[i] = i == tg ? g - dloss : g;
    }
}

__device__ static void zero_row(float *dx, int V) {
    for (int i = threadIdx.x; i < V; i += blockDim.x) dx[i] = 0.0f;
}

__global__ static void backward_k(float *dlogits, const float *logits, const int32_t *targets,
                                  float dloss, int V) {
    __shared__ float sh[32];
    int n = blockIdx.x, tg = targets[n];
    const float *x = logits + (size_t)n * V;
    float *dx = dlogits + (size_t)n * V;
    if (tg < 0) return zero_row(dx, V);
    row_stats st = row_stats_of(x, V, sh);
    row_grad(dx, x, st.max + logf(st.sum), tg, dloss, V);
}

__global__ static void forward_backward_k(float *losses, float *dlogits, const float *logits,
                                          const int32_t *targets, float dloss, int V) {
    __shared__ float sh[32];
    int n = blockIdx.x, tg = targets[n];
    const float *x = logits + (size_t)n * V;
    float *dx = dlogits + (size_t)n * V;
    if (tg < 0) {
        if (threadIdx.x == 0) losses[n] = 0.0f;
        return zero_row(dx, V);
    }
    float x_target = x[tg]; // read before the barriers in row_stats_of, so before any write
    row_stats st = row_stats_of(x, V, sh);
    float lse = st.max + logf(st.sum);
    if (threadIdx.x == 0) losses[n] = lse - x_target;
    row_grad(dx, x, lse, tg, dloss, V);
}

struct half_row {
    const uint16_t *x;
    ds_half h;
    __device__ float operator[](int i) const { return ds_cu_widen(h, x[i]); }
};

// 16-bit logits: the fp32 kernels' arithmetic on the widened row, the gradient rounded
// once per element; the same read-before-write order, so dlogits may be logits.
__global__ static void crossentropy16_k(ds_half h, float *losses, uint16_t *dlogits,
                                        const uint16_t *logits, const int32_t *targets,
                                        float dloss, int V) {
    __shared__ float sh[32];
    int n = blockIdx.x, tg = targets[n];
    half_row x{logits + (size_t)n * V, h};
    uint16_t *dx = dlogits ? dlogits + (size_t)n * V : NULL;
    if (tg < 0) {
        if (threadIdx.x == 0 && losses) losses[n] = 0.0f;
        if (dx)
            for (int i = threadIdx.x; i < V; i += blockDim.x) dx[i] = 0;
        return;
    }
    float x_target = x[tg]; // before the barriers in row_stats_of, so before any write
    row_stats st = row_stats_of(x, V, sh);
    float lse = st.max + logf(st.sum);
    if (threadIdx.x == 0 && losses) losses[n] = lse - x_target;
    if (!dx) return;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float g = dloss * ds_km_expf(x[i] - lse);
        dx[i] = ds_cu_narrow(h, i == tg ? g - dloss : g);
    }
}

static int total_of(ds_cuda_ctx *ctx, const float *losses, int N, double *total) {
    if (!total) return 0;
    float *h = (float *)malloc((size_t)N * sizeof *h);
    if (!h) return DS_CU_FAIL(ctx, "out of host memory (%d losses)", N);
    int rc = ds_cuda_to_host(ctx, h, losses, (size_t)N * sizeof *h);
    double t = 0.0;
    for (int n = 0; n < N; n++) t += h[n];
    free(h);
    if (rc == 0) *total = t;
    return rc;
}

extern "C" int ds_cuda_crossentropy_forward(ds_cuda_ctx *ctx, float *losses, const float *logits,
                                            const int32_t *targets, int N, int V,
                                            double *total) {
    DS_CU_ARG(ctx, losses && logits && targets && N > 0 && V > 0);
    forward_k<<<N, CE_THREADS, 0, ctx->stream>>>(losses, logits, targets, V);
    DS_CU_LAUNCHED(ctx, "crossentropy forward");
    return total_of(ctx, losses, N, total);
}

extern "C" int ds_cuda_crossentropy_backward(ds_cuda_ctx *ctx, float *dlogits,
                                             const float *logits, const int32_t *targets,
                                             float dloss, int N, int V) {
    DS_CU_ARG(ctx, dlogits && logits && targets && N > 0 && V > 0);
    backward_k<<<N, CE_THREADS, 0, ctx->stream>>>(dlogits, logits, targets, dloss, V);
    DS_CU_LAUNCHED(ctx, "crossentropy backward");
    return 0;
}

extern "C" int ds_cuda_crossentropy_forward_backward(ds_cuda_ctx *ctx, float *losses,
                                                     float *dlogits, const float *logits,
                                                     const int32_t *targets, float dloss, int N,
                                                     int V, double *total) {
    DS_CU_ARG(ctx, losses && dlogits && logits && targets && N > 0 && V > 0);
    forward_backward_k<<<N, CE_THREADS, 0, ctx->stream>>>(losses, dlogits, logits, targets,
                                                          dloss, V);
    DS_CU_LAUNCHED(ctx, "crossentropy forward_backward");
    return total_of(ctx, losses, N, total);
}

extern "C" int ds_cuda_crossentropy16(ds_cuda_ctx *ctx, ds_half h, float *losses,
                                      uint16_t *dlogits, const uint16_t *logits,
                                      const int32_t *targets, float dloss, int N, int V) {
    DS_CU_ARG(ctx, logits && targets && N > 0 && V > 0);
    crossentropy16_k<<<N, CE_THREADS, 0, ctx->stream>>>(h, losses, dlogits, logits, targets,
                                                        dloss, V);
    DS_CU_LAUNCHED(ctx, "crossentropy16");
    return 0;
}
