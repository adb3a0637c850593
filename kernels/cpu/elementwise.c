/* Pointwise kernels. GELU is GPT-2's tanh approximation, written in its equivalent
 * sigmoid form 0.5*(1 + tanh(u)) = 1 / (1 + exp(-2u)): one exp, no cancellation near 0.
 * Work is split into fixed chunks; each chunk runs a SIMD-cloned range worker. */
#include "kernels.h"
#include "simd.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBE 0.044715f
#define CHUNK 8192

static inline float gelu_fwd1(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return x / (1.0f + ds_expf(-2.0f * u));
}

static inline float gelu_bwd1(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    float du = GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
    float s = 1.0f / (1.0f + ds_expf(-2.0f * u));
    return s + x * s * (1.0f - s) * 2.0f * du;
}

DS_SIMD static void gelu_fwd_range(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gelu_fwd1(inp[i]);
}

DS_SIMD static void gelu_bwd_range(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) dinp[i] += gelu_bwd1(inp[i]) * dout[i];
}

static size_t chunk_len(size_t c, size_t n) {
    size_t lo = c * CHUNK;
    return lo + CHUNK < n ? CHUNK : n - lo;
}

void ds_add_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void ds_accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

void ds_scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void ds_gelu_forward(float *out, const float *inp, size_t n) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t c = 0; c < nchunks; c++)
        gelu_fwd_range(out + c * CHUNK, inp + c * CHUNK, chunk_len(c, n));
}

void ds_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (size_t c = 0; c < nchunks; c++)
        gelu_bwd_range(dinp + c * CHUNK, inp + c * CHUNK, dout + c * CHUNK, chunk_len(c, n));
}
