/* Dropout from Philox-4x32-10 (Salmon et al., SC'11). Element i draws word g%4 of the
 * block with counter {g/4, step, layer, micro}, g = key.offset + i, under key {seed lo,
 * seed hi}: the mask is a pure function of (key, i), so a recomputation, any thread count and backward all see
 * the same mask without storing it. The generator and the keep rule live in
 * kernel_math.h, shared with the CUDA kernels, so both backends draw the same mask. */
#include "kernels.h"
#include "simd.h"

void ds_philox4x32(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    ds_km_philox4x32_10(c, key);
    for (int j = 0; j < 4; j++) out[j] = c[j];
}

/* dst = base + dropout(src), or dropout(src) where base is NULL: base is dst itself for
 * the accumulating backward, a Residual's input for the fused add (the bits of
 * ds_add_forward(x, dropout(src)): one fp32 add after the same y) */
static void dropout_apply(float *dst, const float *base, const float *src, size_t n, float p,
                          ds_rng_key key) {
    if (p <= 0.0f) {
        for (size_t i = 0; i < n; i++) dst[i] = base ? base[i] + src[i] : src[i];
        return;
    }
    uint32_t thresh = ds_km_drop_threshold(p);
    float keep_scale = ds_km_keep_scale(p);
    uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    /* blocks of the global index g = offset + i: an offset that is not a multiple of 4
     * starts and ends inside a block */
    uint64_t first = key.offset / 4, nblocks = (key.offset + n + 3) / 4 - first;
#pragma omp parallel for schedule(dynamic, 4096) if (n > DS_PAR_MIN / 4)
    for (uint64_t b = 0; b < nblocks; b++) {
        uint64_t blk = first + b;
        uint32_t r[4];
        ds_km_dropout_draws(r, blk, k, key.step, key.layer, key.micro);
        for (int j = 0; j < 4; j++) {
            uint64_t g = blk * 4 + (uint64_t)j;
            if (g < key.offset) continue;
            size_t i = (size_t)(g - key.offset);
            if (i >= n) break;
            float y = ds_km_dropout1(src[i], r[j], p, thresh, keep_scale);
            dst[i] = base ? base[i] + y : y;
        }
    }
}

void ds_dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key) {
    dropout_apply(out, NULL, inp, n, p, key);
}

void ds_dropout_backward(float *dinp, int acc, const float *dout, size_t n, float p,
                         ds_rng_key key) {
    dropout_apply(dinp, acc ? dinp : NULL, dout, n, p, key);
}

void ds_dropout_add_forward(float *out, const float *x, const float *f, size_t n, float p,
                            ds_rng_key key) {
    dropout_apply(out, x, f, n, p, key);
}
