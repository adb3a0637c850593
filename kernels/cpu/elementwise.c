/* Pointwise kernels. GELU is GPT-2's tanh approximation, written in its equivalent
 * sigmoid form 0.5*(1 + tanh(u)) = 1 / (1 + exp(-2u)) (kernel_math.h): one exp, no
 * cancellation near 0. Work is split into fixed chunks; each runs a SIMD-cloned worker. */
#include "half_block.h"
#include "kernels.h"
#include "simd.h"

#define CHUNK 8192

DS_SIMD static void gelu_fwd_range(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = ds_km_gelu_fwd(inp[i]);
}

DS_SIMD static void gelu_bwd_range(float *dinp, int acc, const float *inp, const float *dout,
                                   size_t n) {
    if (acc)
        for (size_t i = 0; i < n; i++) dinp[i] += ds_km_gelu_grad(inp[i]) * dout[i];
    else
        for (size_t i = 0; i < n; i++) dinp[i] = ds_km_gelu_grad(inp[i]) * dout[i];
}

static size_t chunk_len(size_t c, size_t n) {
    size_t lo = c * CHUNK;
    return lo + CHUNK < n ? CHUNK : n - lo;
}

void ds_add_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void ds_accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void ds_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n > DS_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void ds_gelu_forward(float *out, const float *inp, size_t n) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 4)
    for (size_t c = 0; c < nchunks; c++)
        gelu_fwd_range(out + c * CHUNK, inp + c * CHUNK, chunk_len(c, n));
}

void ds_gelu_backward(float *dinp, int acc, const float *inp, const float *dout, size_t n) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 4)
    for (size_t c = 0; c < nchunks; c++)
        gelu_bwd_range(dinp + c * CHUNK, acc, inp + c * CHUNK, dout + c * CHUNK, chunk_len(c, n));
}

/* ---- 16-bit activations (kernel_table.h's gelu16 pair) --------------------------------
 * Blocks of BLOCK elements widened on the stack, run through the fp32 kernels' own range
 * workers and rounded back: each element gets the bits the fp32 entry gives on an fp32
 * copy, with no workspace. */
#define BLOCK 512

/* element i of an array of 16-bit (is16) or fp32 elements */
static const void *elem(const void *p, size_t i, int is16) {
    return (const char *)p + i * (is16 ? sizeof(uint16_t) : sizeof(float));
}

static void gelu16_fwd_range(ds_half h, void *out, const void *inp, size_t n, int in16,
                             int out16) {
    float a[BLOCK], y[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        const float *x = elem(inp, i, in16);
        if (in16) ds_half_widen(h, a, (const uint16_t *)x, m), x = a;
        float *o = out16 ? y : (float *)elem(out, i, 0);
        gelu_fwd_range(o, x, m);
        if (out16) ds_half_narrow(h, (uint16_t *)elem(out, i, 1), y, m);
    }
}

static void gelu16_bwd_range(ds_half h, void *dinp, int acc, const uint16_t *inp,
                             const float *dout, size_t n, int din16) {
    float a[BLOCK], g[BLOCK];
    for (size_t i = 0; i < n; i += BLOCK) {
        size_t m = n - i < BLOCK ? n - i : BLOCK;
        ds_half_widen(h, a, inp + i, m);
        float *d = din16 ? g : (float *)elem(dinp, i, 0);
        gelu_bwd_range(d, acc, a, dout + i, m);
        if (din16) ds_half_narrow(h, (uint16_t *)elem(dinp, i, 1), g, m);
    }
}

void ds_gelu16_forward(ds_half h, void *out, const void *inp, size_t n, int in16, int out16) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 4)
    for (size_t c = 0; c < nchunks; c++)
        gelu16_fwd_range(h, (void *)elem(out, c * CHUNK, out16), elem(inp, c * CHUNK, in16),
                         chunk_len(c, n), in16, out16);
}

void ds_gelu16_backward(ds_half h, void *dinp, int acc, const uint16_t *inp, const float *dout,
                        size_t n, int din16) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    if (din16) acc = 0; /* a 16-bit gradient is written (kernel_table.h) */
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 4)
    for (size_t c = 0; c < nchunks; c++)
        gelu16_bwd_range(h, (void *)elem(dinp, c * CHUNK, din16), acc, inp + c * CHUNK,
                         dout + c * CHUNK, chunk_len(c, n), din16);
}
