/* Arithmetic on 16-bit arrays through fp32 (the sum of squares and the optimizer steps
 * are with the fp32 ones in optim.c): each call converts a block into fp32 on the
 * stack, computes there and rounds the results back once, so the rounding is the
 * converters' (round to nearest even) and the fast converter paths are used. */
#include "half_block.h"
#include "kernels.h"
#include "simd.h"

#define BLOCK 512

/* Large arrays (a parameter's image: GPT-2's token embedding is 38.6M elements) are
 * split over the threads in fixed chunks; elementwise, so the bits do not change. */
#define CHUNK 16384

void ds_half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) ds_half_narrow(h, dst + c, src + c, n - c < CHUNK ? n - c : CHUNK);
}

void ds_half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) ds_half_widen(h, dst + c, src + c, n - c < CHUNK ? n - c : CHUNK);
}

static void round_range(ds_half h, float *dst, const float *src, size_t n) {
    uint16_t b[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        ds_half_narrow(h, b, src + i, m);
        ds_half_widen(h, dst + i, b, m);
    }
}

void ds_half_round_f32(ds_half h, float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) round_range(h, dst + c, src + c, n - c < CHUNK ? n - c : CHUNK);
}

void ds_half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) ds_half_acc_block(h, acc + c, x + c, n - c < CHUNK ? n - c : CHUNK);
}

void ds_half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    float x[BLOCK], y[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        ds_half_widen(h, x, a + i, m);
        ds_half_widen(h, y, b + i, m);
        for (size_t j = 0; j < m; j++) x[j] += y[j];
        ds_half_narrow(h, out + i, x, m);
    }
}

void ds_half_scale(ds_half h, uint16_t *x, float k, size_t n) {
    float a[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        ds_half_widen(h, a, x + i, m);
        for (size_t j = 0; j < m; j++) a[j] *= k;
        ds_half_narrow(h, x + i, a, m);
    }
}
