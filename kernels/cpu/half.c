/* Arithmetic on 16-bit arrays through fp32 (the sum of squares and the optimizer steps
 * are with the fp32 ones in optim.c): each call converts a block into fp32 on the
 * stack, computes there and rounds the results back once, so the rounding is the
 * converters' (round to nearest even) and the fast converter paths are used. */
#include "kernels.h"
#include "simd.h"

#define BLOCK 512

static void widen(ds_half h, float *dst, const uint16_t *src, size_t n) {
    if (h == DS_HALF_BF16) ds_bf16_to_f32(dst, src, n);
    else ds_f16_to_f32(dst, src, n);
}

static void narrow(ds_half h, uint16_t *dst, const float *src, size_t n) {
    if (h == DS_HALF_BF16) ds_f32_to_bf16(dst, src, n);
    else ds_f32_to_f16(dst, src, n);
}

/* Large arrays (a parameter's image: GPT-2's token embedding is 38.6M elements) are
 * split over the threads in fixed chunks; elementwise, so the bits do not change. */
#define CHUNK 16384

void ds_half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) narrow(h, dst + c, src + c, n - c < CHUNK ? n - c : CHUNK);
}

void ds_half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) widen(h, dst + c, src + c, n - c < CHUNK ? n - c : CHUNK);
}

static void acc_range(ds_half h, uint16_t *acc, const float *x, size_t n) {
    float a[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(h, a, acc + i, m);
        for (size_t j = 0; j < m; j++) a[j] += x[i + j];
        narrow(h, acc + i, a, m);
    }
}

void ds_half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t c = 0; c < n; c += CHUNK) acc_range(h, acc + c, x + c, n - c < CHUNK ? n - c : CHUNK);
}

void ds_half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    float x[BLOCK], y[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(h, x, a + i, m);
        widen(h, y, b + i, m);
        for (size_t j = 0; j < m; j++) x[j] += y[j];
        narrow(h, out + i, x, m);
    }
}

void ds_half_scale(ds_half h, uint16_t *x, float k, size_t n) {
    float a[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        widen(h, a, x + i, m);
        for (size_t j = 0; j < m; j++) a[j] *= k;
        narrow(h, x + i, a, m);
    }
}
