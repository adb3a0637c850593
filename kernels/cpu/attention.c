/* Causal multi-head self-attention on packed qkv[B,T,3C].
 *
 * Work is split by (batch, head): one head is one thread's job, so backward can add into
 * the dk/dv rows of earlier positions in a fixed order for any thread count. Inside a head
 * everything is an axpy over a contiguous row: K and V are transposed into [hs][T] once,
 * so a row of scores is sum_i q[i] * Kt[i][0..t] (no horizontal sums), and the products
 * with V and K run along the head dimension. The whole per-head function is SIMD-cloned
 * so the small helpers inline into the vector code. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

typedef struct att_dims {
    int B, T, C, NH, hs;
    float scale;
} att_dims;

static inline void axpy(float *restrict y, float a, const float *restrict x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* dst[i*T + t] = src[t*stride + i]: one head's keys or values as [hs][T] */
static void transpose_head(float *dst, const float *src, size_t stride, int T, int hs) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) dst[(size_t)i * T + t] = src[(size_t)t * stride + i];
}

static float *head_buffer(size_t n) {
    float *p = malloc(n * sizeof *p);
    if (!p) abort(); /* a few KB per head: failure here means the process is already lost */
    return p;
}

/* scores[0..t] = scale * q . K[0..t], as axpys over rows of Kt */
static inline void scores_row(float *restrict s, const float *restrict q, const float *Kt,
                              int t, att_dims d) {
    for (int u = 0; u <= t; u++) s[u] = 0.0f;
    for (int i = 0; i < d.hs; i++) axpy(s, q[i] * d.scale, Kt + (size_t)i * d.T, t + 1);
}

DS_SIMD static void forward_head(float *out, float *att, const float *qkv, int b, int h,
                                 att_dims d) {
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    float *Kt = head_buffer((size_t)hs * T);
    transpose_head(Kt, base + C, C3, T, hs);
    for (int t = 0; t < T; t++) {
        float *a = att + (((size_t)b * d.NH + h) * T + t) * T;
        scores_row(a, base + t * C3, Kt, t, d);
        float maxv = -INFINITY;
        for (int u = 0; u <= t; u++) maxv = a[u] > maxv ? a[u] : maxv;
        float sum = 0.0f;
        for (int u = 0; u <= t; u++) {
            a[u] = ds_expf(a[u] - maxv);
            sum += a[u];
        }
        float inv = 1.0f / sum;
        for (int u = 0; u <= t; u++) a[u] *= inv;
        for (int u = t + 1; u < T; u++) a[u] = 0.0f;
        float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int u = 0; u <= t; u++) axpy(o, a[u], base + u * C3 + 2 * C, hs);
    }
    free(Kt);
}

void ds_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int NH) {
    att_dims d = {B, T, C, NH, C / NH, 1.0f / sqrtf((float)(C / NH))};
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) forward_head(out, att, qkv, b, h, d);
}

DS_SIMD static void backward_head(float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *att, int b, int h,
                                  att_dims d) {
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C, hT = (size_t)hs * T;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    float *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
    /* Vt, then this head's dk and dv accumulated locally, added to dqkv at the end */
    float *Vt = head_buffer(3 * hT), *dK = Vt + hT, *dV = dK + hT;
    transpose_head(Vt, base + 2 * C, C3, T, hs);
    memset(dK, 0, 2 * hT * sizeof *dK);
    for (int t = 0; t < T; t++) {
        size_t row = (((size_t)b * d.NH + h) * T + t) * T;
        const float *a = att + row;
        float *dpre = scratch + row;
        const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        const float *q = base + t * C3;
        /* datt = dy . V[0..t]; softmax backward in place */
        for (int u = 0; u <= t; u++) dpre[u] = 0.0f;
        for (int i = 0; i < hs; i++) axpy(dpre, dy[i], Vt + (size_t)i * T, t + 1);
        float dot = 0.0f;
        for (int u = 0; u <= t; u++) dot += a[u] * dpre[u];
        for (int u = 0; u <= t; u++) dpre[u] = a[u] * (dpre[u] - dot) * d.scale;
        float *dq = dbase + t * C3;
        for (int u = 0; u <= t; u++) {
            axpy(dq, dpre[u], base + u * C3 + C, hs);
            axpy(dK + (size_t)u * hs, dpre[u], q, hs);
            axpy(dV + (size_t)u * hs, a[u], dy, hs);
        }
    }
    for (int t = 0; t < T; t++) {
        float *dk = dbase + t * C3 + C, *dv = dbase + t * C3 + 2 * C;
        for (int i = 0; i < hs; i++) {
            dk[i] += dK[(size_t)t * hs + i];
            dv[i] += dV[(size_t)t * hs + i];
        }
    }
    free(Vt);
}

void ds_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH) {
    att_dims d = {B, T, C, NH, C / NH, 1.0f / sqrtf((float)(C / NH))};
#pragma omp parallel for collapse(2) schedule(static)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) backward_head(dqkv, scratch, dout, qkv, att, b, h, d);
}
