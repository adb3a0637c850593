/* Pointwise kernels. GELU is GPT-2's tanh approximation, written in its equivalent
 * sigmoid form 0.5*(1 + tanh(u)) = 1 / (1 + exp(-2u)) (kernel_math.h): one exp, no
 * cancellation near 0. Work is split into fixed chunks; each runs a SIMD-cloned worker. */
#include "kernels.h"
#include "simd.h"

#define CHUNK 8192

DS_SIMD static void gelu_fwd_range(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = ds_km_gelu_fwd(inp[i]);
}

DS_SIMD static void gelu_bwd_range(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = 0; i < n; i++) dinp[i] += ds_km_gelu_grad(inp[i]) * dout[i];
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

void ds_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 4)
    for (size_t c = 0; c < nchunks; c++)
        gelu_bwd_range(dinp + c * CHUNK, inp + c * CHUNK, dout + c * CHUNK, chunk_len(c, n));
}
