/* Dropout from Philox-4x32-10 (Salmon et al., SC'11). Element i draws word i%4 of the
 * block with counter {i/4, step, layer, micro} under key {seed lo, seed hi}: the mask is
 * a pure function of (key, i), so a recomputation, any thread count and backward all see
 * the same mask without storing it. */
#include <string.h>

#include "kernels.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

static inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c[0] = hi1 ^ c[1] ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k[1];
    c[3] = lo0;
}

void ds_philox4x32(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]) {
    uint32_t c[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += PHILOX_W0;
            k[1] += PHILOX_W1;
        }
        philox_round(c, k);
    }
    memcpy(out, c, sizeof c);
}

/* keep iff the 32-bit draw is >= p * 2^32; returns the scale for kept elements */
static uint32_t drop_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

static void dropout_apply(float *dst, const float *src, size_t n, float p, ds_rng_key key,
                          int accumulate) {
    if (p <= 0.0f) {
        for (size_t i = 0; i < n; i++) dst[i] = accumulate ? dst[i] + src[i] : src[i];
        return;
    }
    uint32_t thresh = drop_threshold(p);
    float keep_scale = p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
    uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    size_t nblocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t blk = 0; blk < nblocks; blk++) {
        uint32_t ctr[4] = {(uint32_t)blk, key.step, key.layer, key.micro};
        uint32_t r[4];
        ds_philox4x32(r, ctr, k);
        for (int j = 0; j < 4; j++) {
            size_t i = blk * 4 + (size_t)j;
            if (i >= n) break;
            float y = (p < 1.0f && r[j] >= thresh) ? src[i] * keep_scale : 0.0f;
            dst[i] = accumulate ? dst[i] + y : y;
        }
    }
}

void ds_dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key) {
    dropout_apply(out, inp, n, p, key, 0);
}

void ds_dropout_backward(float *dinp, const float *dout, size_t n, float p, ds_rng_key key) {
    dropout_apply(dinp, dout, n, p, key, 1);
}
