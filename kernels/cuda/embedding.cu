// Embedding lookup and its deterministic backward: the token indices are sorted by id
// (cub's radix sort is stable, so equal ids keep n = 0..N-1 order), then the first
// position of each id's run owns that table row and adds its dout rows in that order:
// no atomics, and the same additions in the same order as the CPU kernel.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_common.cuh"

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

__global__ static void backward_runs_k(float *dtable, const float *dout, const int32_t *sorted_ids,
                                       const int32_t *order, int N, int C) {
    int i = blockIdx.x;
    int id = sorted_ids[i];
    if (i > 0 && sorted_ids[i - 1] == id) return; // not the start of a run
    float *dst = dtable + (size_t)id * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dst[c];
        for (int j = i; j < N && sorted_ids[j] == id; j++) acc += dout[(size_t)order[j] * C + c];
        dst[c] = acc;
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

extern "C" int ds_cuda_embedding_backward(ds_cuda_ctx *ctx, float *dtable, const float *dout,
                                          const int32_t *ids, int N, int C) {
    DS_CU_ARG(ctx, dtable && dout && ids && N > 0 && C > 0);
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
