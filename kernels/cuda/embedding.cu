// Embedding lookup and its deterministic backward: the token indices are sorted by id
// (cub's radix sort is stable, so equal ids keep n = 0..N-1 order), then the first
// position of each id's run owns that table row and adds its dout rows in that order:
// no atomics, and the same additions in the same order as the CPU kernel. A 16-bit
// table (embedding16) is read and updated as it is: the run's rows summed in fp32 from
// zero, then added to the 16-bit row with one rounding.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.cuh"
#include "half_math.cuh"

__global__ static void forward_k(float *out, const int32_t *ids, const float *table, int N,
                                 int C) {
    int n = blockIdx.x;
    const float *row = table + (size_t)ids[n] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) out[(size_t)n * C + c] = row[c];
}

extern "C" int ds_cuda_embedding_forward(ds_cuda_ctx *ctx, float *out, const int32_t *ids,
                                         const float *table, int N, int C) {
    DS_CU_ARG(ctx, out && ids && table && N > 0 && C > 0);
    forward_k<<<N, 256, 0, ctx->stream>>>(out, ids, table, N, C);
    DS_CU_LAUNCHED(ctx, "embedding forward");
    return 0;
}

__global__ static void iota_k(int32_t *x, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) x[i] = i;
}

// an fp32 table row element takes the run's rows directly; a 16-bit one gets their fp32
// sum, rounded once
struct table_f32 {
    float *t;
    __device__ float start(size_t i) const { return t[i]; }
    __device__ void finish(size_t i, float acc) const { t[i] = acc; }
};
struct table_half {
    uint16_t *t;
    ds_half h;
    __device__ float start(size_t) const { return 0.0f; }
    __device__ void finish(size_t i, float acc) const {
        t[i] = ds_cu_narrow(h, ds_cu_widen(h, t[i]) + acc);
    }
};

template <typename D>
__global__ static void backward_runs_k(D dtable, const float *dout, const int32_t *sorted_ids,
                                       const int32_t *order, int N, int C) {
    int i = blockIdx.x;
    int id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) return; // not the start of a run
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        size_t at = (size_t)id * C + c;
        float acc = dtable.start(at);
        for (int j = i; j < N && sorted_ids[j] == id; j++) acc += dout[(size_t)order[j] * C + c];
        dtable.finish(at, acc);
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

// ids sorted (stably) with their positions into the context's scratch, then one block
// per run
template <typename D>
static int backward(ds_cuda_ctx *ctx, D dtable, const float *dout, const int32_t *ids, int N,
                    int C) {
    size_t sort_bytes = 0;
    DS_CU_CHECK(ctx, cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const int32_t *)NULL,
                                                     (int32_t *)NULL, (const int32_t *)NULL,
                                                     (int32_t *)NULL, N, 0, 32, ctx->stream));
    size_t vec = align256((size_t)N * sizeof(int32_t));
    char *buf = (char *)ds_cu_scratch(ctx, 3 * vec + align256(sort_bytes));
    if (!buf) return -1;
    int32_t *iota = (int32_t *)buf, *keys = (int32_t *)(buf + vec), *order = (int32_t *)(buf + 2 * vec);
    void *tmp = buf + 3 * vec;
    iota_k<<<(N + 255) / 256, 256, 0, ctx->stream>>>(iota, N);
    DS_CU_LAUNCHED(ctx, "embedding backward iota");
    DS_CU_CHECK(ctx, cub::DeviceRadixSort::SortPairs(tmp, sort_bytes, ids, keys, iota, order, N,
                                                     0, 32, ctx->stream));
    backward_runs_k<<<N, 256, 0, ctx->stream>>>(dtable, dout, keys, order, N, C);
    DS_CU_LAUNCHED(ctx, "embedding backward");
    return 0;
}

extern "C" int ds_cuda_embedding_backward(ds_cuda_ctx *ctx, float *dtable, const float *dout,
                                          const int32_t *ids, int N, int C) {
    DS_CU_ARG(ctx, dtable && dout && ids && N > 0 && C > 0);
    return backward(ctx, table_f32{dtable}, dout, ids, N, C);
}

// ---- 16-bit tables ---------------------------------------------------------------------

__global__ static void forward16_k(ds_half h, float *out, const int32_t *ids,
                                   const uint16_t *table, int N, int C) {
    int n = blockIdx.x;
    const uint16_t *row = table + (size_t)ids[n] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        out[(size_t)n * C + c] = ds_cu_widen(h, row[c]);
}

extern "C" int ds_cuda_embedding16_forward(ds_cuda_ctx *ctx, ds_half h, float *out,
                                           const int32_t *ids, const uint16_t *table, int N,
                                           int C) {
    DS_CU_ARG(ctx, out && ids && table && N > 0 && C > 0);
    forward16_k<<<N, 256, 0, ctx->stream>>>(h, out, ids, table, N, C);
    DS_CU_LAUNCHED(ctx, "embedding16 forward");
    return 0;
}

extern "C" int ds_cuda_embedding16_backward(ds_cuda_ctx *ctx, ds_half h, uint16_t *dtable,
                                            const float *dout, const int32_t *ids, int N,
                                            int C) {
    DS_CU_ARG(ctx, dtable && dout && ids && N > 0 && C > 0);
    return backward(ctx, table_half{dtable, h}, dout, ids, N, C);
}

__global__ static void posemb16_forward_k(ds_half h, float *out, const float *inp,
                                          const uint16_t *table, size_t tc, size_t n) {
    GRID_STRIDE(i, n) out[i] = inp[i] + ds_cu_widen(h, table[i % tc]);
}

extern "C" int ds_cuda_posemb16_forward(ds_cuda_ctx *ctx, ds_half h, float *out,
                                        const float *inp, const uint16_t *table, int B, int T,
                                        int C) {
    DS_CU_ARG(ctx, out && inp && table && B > 0 && T > 0 && C > 0);
    size_t tc = (size_t)T * C;
    DS_CU_LAUNCH_N(ctx, "posemb16 forward", posemb16_forward_k, (size_t)B * tc, h, out, inp,
                   table, tc, (size_t)B * tc);
}

// one thread per table element, the batch summed in order b = 0..B-1
__global__ static void posemb16_backward_k(ds_half h, uint16_t *dtable, const float *dout,
                                           int B, size_t tc) {
    GRID_STRIDE(i, tc) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[(size_t)b * tc + i];
        dtable[i] = ds_cu_narrow(h, ds_cu_widen(h, dtable[i]) + s);
    }
}

extern "C" int ds_cuda_posemb16_backward(ds_cuda_ctx *ctx, ds_half h, uint16_t *dtable,
                                         const float *dout, int B, int T, int C) {
    DS_CU_ARG(ctx, dtable && dout && B > 0 && T > 0 && C > 0);
    size_t tc = (size_t)T * C;
    DS_CU_LAUNCH_N(ctx, "posemb16 backward", posemb16_backward_k, tc, h, dtable, dout, B, tc);
}
