// Dropout on the CPU kernel's Philox stream (kernel_math.h): thread j draws the block of
// four words for global indices 4j..4j+3 (g = key.offset + i), so every element sees the
// bits it sees on the CPU, the accumulating backward included.
#include "cuda_common.cuh"

__global__ static void dropout_k(float *dst, const float *src, size_t n, float p,
                                 uint32_t thresh, float keep_scale, uint32_t k0, uint32_t k1,
                                 uint32_t step, uint32_t layer, uint32_t micro,
                                 unsigned long long offset, const float *base) {
    unsigned long long first = offset / 4, nblocks = (offset + n + 3) / 4 - first;
    uint32_t key[2] = {k0, k1};
    for (unsigned long long b = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         b < nblocks; b += (unsigned long long)gridDim.x * blockDim.x) {
        unsigned long long blk = first + b;
        uint32_t r[4];
        ds_km_dropout_draws(r, blk, key, step, layer, micro);
        for (int j = 0; j < 4; j++) {
            unsigned long long g = blk * 4 + (unsigned long long)j;
            if (g < offset) continue;
            size_t i = (size_t)(g - offset);
            if (i >= n) break;
            float y = ds_km_dropout1(src[i], r[j], p, thresh, keep_scale);
            // __fadd_rn: never fused with the multiply in y into an FMA (nvcc's default
            // --fmad=true may); the CPU (x86-64-v2, no FMA) rounds x * keep_scale first
            dst[i] = base ? __fadd_rn(base[i], y) : y;
        }
    }
}

__global__ static void copy_or_add_k(float *dst, const float *base, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = base ? base[i] + src[i] : src[i];
}

// dst = base + dropout(src), or dropout(src) where base is NULL: base is dst for the
// accumulating backward, a Residual's input for the fused add (the CPU's bits)
static int dropout_apply(ds_cuda_ctx *ctx, float *dst, const float *base, const float *src,
                         size_t n, float p, ds_rng_key key) {
    DS_CU_ARG(ctx, n == 0 || (dst && src));
    if (n == 0) return 0;
    if (p <= 0.0f) {
        copy_or_add_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(dst, base, src, n);
        DS_CU_LAUNCHED(ctx, "dropout (p = 0)");
        return 0;
    }
    dropout_k<<<ds_cu_blocks((n + 3) / 4 + 1), DS_CU_THREADS, 0, ctx->stream>>>(
        dst, src, n, p, ds_km_drop_threshold(p), ds_km_keep_scale(p), (uint32_t)key.seed,
        (uint32_t)(key.seed >> 32), key.step, key.layer, key.micro, (unsigned long long)key.offset, base);
    DS_CU_LAUNCHED(ctx, "dropout");
    return 0;
}

extern "C" int ds_cuda_dropout_forward(ds_cuda_ctx *ctx, float *out, const float *inp, size_t n,
                                       float p, ds_rng_key key) {
    return dropout_apply(ctx, out, NULL, inp, n, p, key);
}

extern "C" int ds_cuda_dropout_backward(ds_cuda_ctx *ctx, float *dinp, int acc, const float *dout,
                                        size_t n, float p, ds_rng_key key) {
    return dropout_apply(ctx, dinp, acc ? dinp : NULL, dout, n, p, key);
}

extern "C" int ds_cuda_dropout_add_forward(ds_cuda_ctx *ctx, float *out, const float *x,
                                           const float *f, size_t n, float p, ds_rng_key key) {
    DS_CU_ARG(ctx, n == 0 || x);
    return dropout_apply(ctx, out, x, f, n, p, key);
}
