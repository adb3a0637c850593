/* Causal multi-head self-attention on packed qkv[B,T,3C].
 *
 * Work is split by (batch, head): one head is one thread's job, and every sum inside it
 * runs in a fixed order, so results do not depend on the thread count.
 *
 * Inside a head every product is the same shape, out[0..len) = sum_r w[r] * rows[r][0..len)
 * (rows_combine): a transposed matrix-vector product whose output block stays in registers
 * while the rows stream through, one load per multiply-add and no horizontal sums. Scores
 * use K transposed to [hs][T] (rows over the head dimension, output over positions);
 * outputs, dq, dk and dv use rows of Q, K, V or dy directly. Backward first turns every
 * row of probabilities into its softmax gradient (scratch), then forms dq by rows and dk,
 * dv by columns, so nothing is scattered. The per-head functions are SIMD-cloned.
 *
 * Dropout on the probabilities (the _dropout pair) multiplies each row of P by its mask
 * row, drawn exactly as ds_dropout_forward draws the elements of the [B,NH,T,T] tensor,
 * before it meets V. att keeps P itself: backward redraws the mask rows, multiplies
 * dy.V by them (the gradient of P) and combines dy with the dropped rows for dv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

#define BLOCK 32

typedef struct att_dims {
    int B, T, C, NH, hs;
    size_t C3; /* row stride of qkv */
    float scale;
} att_dims;

/* Dropout on the probabilities; p = 0: none. */
typedef struct att_drop {
    float p, keep_scale;
    uint32_t thresh, k[2];
    ds_rng_key key;
} att_drop;

static att_drop att_drop_of(float p, ds_rng_key key) {
    att_drop d = {p, ds_km_keep_scale(p), ds_km_drop_threshold(p),
                  {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)}, key};
    return d;
}

/* m[j] = keep scale or 0 for element i0 + j of the probabilities (j < n): the draw of
 * global index offset + i0 + j, word g%4 of block g/4, as in dropout.c. */
static void mask_row(float *m, uint64_t i0, int n, const att_drop *d) {
    uint64_t g = d->key.offset + i0, end = g + (uint64_t)n;
    float *dst = m;
    while (g < end) {
        uint32_t r[4] = {(uint32_t)(g / 4), d->key.step, d->key.layer, d->key.micro};
        ds_km_philox4x32_10(r, d->k);
        for (int w = (int)(g % 4); w < 4 && g < end; w++, g++)
            *dst++ = ds_km_dropout1(1.0f, r[w], d->p, d->thresh, d->keep_scale);
    }
}

/* out[0..len) (+)= sum_{r < nrows} w[r] * rows[r*stride + 0..len) */
static inline void rows_combine(float *restrict out, const float *restrict w,
                                const float *restrict rows, size_t stride, int nrows, int len,
                                int accumulate) {
    int i0 = 0;
    for (; i0 + BLOCK <= len; i0 += BLOCK) {
        float acc[BLOCK];
        for (int j = 0; j < BLOCK; j++) acc[j] = accumulate ? out[i0 + j] : 0.0f;
        for (int r = 0; r < nrows; r++) {
            const float *row = rows + r * stride + i0;
            float wr = w[r];
            for (int j = 0; j < BLOCK; j++) acc[j] += wr * row[j];
        }
        for (int j = 0; j < BLOCK; j++) out[i0 + j] = acc[j];
    }
    if (i0 < len) {
        int n = len - i0;
        float acc[BLOCK];
        for (int j = 0; j < n; j++) acc[j] = accumulate ? out[i0 + j] : 0.0f;
        for (int r = 0; r < nrows; r++) {
            const float *row = rows + r * stride + i0;
            float wr = w[r];
            for (int j = 0; j < n; j++) acc[j] += wr * row[j];
        }
        for (int j = 0; j < n; j++) out[i0 + j] = acc[j];
    }
}

/* dst[i*T + t] = src[t*stride + i]: one head's keys or values as [hs][T] */
static void transpose_head(float *dst, const float *src, size_t stride, int T, int hs) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hs; i++) dst[(size_t)i * T + t] = src[(size_t)t * stride + i];
}

static float *head_buffer(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) abort(); /* tens of KB per head: failure here means the process is already lost */
    return p;
}

/* softmax of a[0..t] in place, zeros after */
static inline void softmax_causal(float *a, int t, int T) {
    float maxv = -INFINITY;
    for (int u = 0; u <= t; u++) maxv = a[u] > maxv ? a[u] : maxv;
    float sum = 0.0f;
    for (int u = 0; u <= t; u++) {
        a[u] = ds_km_expf(a[u] - maxv);
        sum += a[u];
    }
    float inv = 1.0f / sum;
    for (int u = 0; u <= t; u++) a[u] *= inv;
    for (int u = t + 1; u < T; u++) a[u] = 0.0f;
}

DS_SIMD static void forward_head(float *out, float *att, const float *qkv, int b, int h,
                                 att_dims d, const att_drop *dr) {
    int T = d.T, C = d.C, hs = d.hs;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    float *Kt = head_buffer((size_t)hs * T + hs + 2 * (size_t)T), *qs = Kt + (size_t)hs * T;
    float *m = qs + hs, *am = m + T; /* dropout: mask row, dropped probabilities */
    transpose_head(Kt, base + C, d.C3, T, hs);
    for (int t = 0; t < T; t++) {
        size_t row = ((size_t)b * d.NH + h) * T + t;
        float *a = att + row * T;
        const float *q = base + t * d.C3;
        for (int i = 0; i < hs; i++) qs[i] = q[i] * d.scale;
        rows_combine(a, qs, Kt, T, hs, t + 1, 0);
        softmax_causal(a, t, T);
        const float *w = a;
        if (dr->p > 0.0f) {
            mask_row(m, row * T, t + 1, dr);
            for (int u = 0; u <= t; u++) am[u] = a[u] * m[u];
            w = am;
        }
        float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
        rows_combine(o, w, base + 2 * C, d.C3, t + 1, hs, 0);
    }
    free(Kt);
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH, const att_drop *dr) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = {B, T, C, NH, C / NH, 3 * (size_t)C, 1.0f / sqrtf((float)(C / NH))};
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel for collapse(2) schedule(dynamic) if (work > 4 * DS_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) forward_head(out, att, qkv, b, h, d, dr);
}

void ds_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int NH) {
    att_drop none = {0};
    attention_forward(out, att, qkv, B, T, C, NH, &none);
}

void ds_attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH, float p, ds_rng_key key) {
    att_drop dr = att_drop_of(p > 0.0f ? p : 0.0f, key);
    attention_forward(out, att, qkv, B, T, C, NH, &dr);
}

DS_SIMD static void backward_head(float *dqkv, float *scratch, const float *dout,
                                  const float *qkv, const float *att, int b, int h,
                                  att_dims d, const att_drop *dr) {
    int T = d.T, C = d.C, hs = d.hs;
    size_t hT = (size_t)hs * T, head = ((size_t)b * d.NH + h) * T * T;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    float *dbase = dqkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    const float *dy0 = dout + (size_t)b * T * C + (size_t)h * hs;
    const float *A = att + head;
    float *dP = scratch + head; /* [T][T]: softmax gradients, pre-scaled */
    int drop = dr->p > 0.0f;
    /* with dropout: Am [T][T] holds the dropped probabilities (what met V), m a mask row */
    size_t extra = drop ? (size_t)T * T + T : 0;
    float *Vt = head_buffer(hT + 2 * (size_t)T + extra), *wa = Vt + hT, *wp = wa + T;
    float *Am = wp + T, *m = Am + (size_t)T * T;
    transpose_head(Vt, base + 2 * C, d.C3, T, hs);
    for (int t = 0; t < T; t++) { /* dP[t] = a * (dy.V - sum(a * dy.V)) * scale */
        const float *a = A + (size_t)t * T;
        float *dp = dP + (size_t)t * T;
        rows_combine(dp, dy0 + (size_t)t * C, Vt, T, hs, t + 1, 0);
        if (drop) { /* dy.V is the gradient of the dropped row: times the mask for P's */
            mask_row(m, (head + (size_t)t * T), t + 1, dr);
            float *am = Am + (size_t)t * T;
            for (int u = 0; u <= t; u++) {
                dp[u] *= m[u];
                am[u] = a[u] * m[u];
            }
        }
        float dot = 0.0f;
        for (int u = 0; u <= t; u++) dot += a[u] * dp[u];
        for (int u = 0; u <= t; u++) dp[u] = a[u] * (dp[u] - dot) * d.scale;
        for (int u = t + 1; u < T; u++) dp[u] = 0.0f;
    }
    for (int t = 0; t < T; t++) /* dq[t] += sum_u dP[t][u] k[u] */
        rows_combine(dbase + t * d.C3, dP + (size_t)t * T, base + C, d.C3, t + 1, hs, 1);
    const float *AV = drop ? Am : A; /* the probabilities that met V */
    for (int u = 0; u < T; u++) { /* dk[u] += sum_t dP[t][u] q[t]; dv[u] += sum_t a[t][u] dy[t] */
        int n = T - u;
        for (int t = u; t < T; t++) {
            wp[t - u] = dP[(size_t)t * T + u];
            wa[t - u] = AV[(size_t)t * T + u];
        }
        rows_combine(dbase + u * d.C3 + C, wp, base + u * d.C3, d.C3, n, hs, 1);
        rows_combine(dbase + u * d.C3 + 2 * C, wa, dy0 + (size_t)u * C, (size_t)C, n, hs, 1);
    }
    free(Vt);
}

static void attention_backward(float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               const att_drop *dr) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = {B, T, C, NH, C / NH, 3 * (size_t)C, 1.0f / sqrtf((float)(C / NH))};
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel for collapse(2) schedule(dynamic) if (work > 2 * DS_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) backward_head(dqkv, scratch, dout, qkv, att, b, h, d, dr);
}

void ds_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH) {
    att_drop none = {0};
    attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, &none);
}

void ds_attention_backward_dropout(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C,
                                   int NH, float p, ds_rng_key key) {
    att_drop dr = att_drop_of(p > 0.0f ? p : 0.0f, key);
    attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH, &dr);
}
