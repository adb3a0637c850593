/* LayerNorm over the last dimension. Rows are independent in forward and in dinp; the
 * parameter gradients sum over rows, so they run as a second pass split by columns and
 * each column sums its rows in order (same bits for any thread count). Row sums use
 * DS_LANES partial sums (vectorisable, fixed order). */
#include <math.h>
#include <string.h>

#include "half_block.h"
#include "kernel_table.h" /* ds_layernorm16_workspace's layout */
#include "kernels.h"
#include "simd.h"

static inline float lane_sum(const float acc[DS_LANES]) {
    float s = 0.0f;
    for (int j = 0; j < DS_LANES; j++) s += acc[j];
    return s;
}

/* columns i0..i0+n-1 of a normalised row into y[0..n-1]: the one expression both an fp32
 * and a 16-bit output store (the latter rounded), so they cannot differ but for that */
static inline void row_values(float *y, const float *x, const float *weight, const float *bias,
                              float m, float s, int i0, int n) {
    for (int i = i0; i < i0 + n; i++)
        y[i - i0] =
            ds_km_layernorm1(x[i], m, s, weight ? weight[i] : 1.0f, bias ? bias[i] : 0.0f);
}

/* y16 not NULL: the row goes there in format h instead of y, a block at a time */
DS_SIMD static void forward_row(float *y, uint16_t *y16, ds_half h, float *mean_out,
                                float *rstd_out, const float *x, const float *weight,
                                const float *bias, int C, float eps) {
    enum { BLOCK = 512 };
    float acc[DS_LANES] = {0};
    int i = 0, tail = C - C % DS_LANES;
    for (; i < tail; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] += x[i + j];
    float m = lane_sum(acc);
    for (; i < C; i++) m += x[i];
    m /= C;
    for (int j = 0; j < DS_LANES; j++) acc[j] = 0.0f;
    for (i = 0; i < tail; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) {
            float d = x[i + j] - m;
            acc[j] += d * d;
        }
    float var = lane_sum(acc);
    for (; i < C; i++) var += (x[i] - m) * (x[i] - m);
    var /= C;
    float s = 1.0f / sqrtf(var + eps);
    if (!y16) row_values(y, x, weight, bias, m, s, 0, C);
    for (int i0 = 0; y16 && i0 < C; i0 += BLOCK) {
        float b[BLOCK];
        int n = C - i0 < BLOCK ? C - i0 : BLOCK;
        row_values(b, x, weight, bias, m, s, i0, n);
        ds_half_narrow(h, y16 + i0, b, (size_t)n);
    }
    if (mean_out) *mean_out = m;
    if (rstd_out) *rstd_out = s;
}

/* out16: out holds format h (forward_row's y16), else fp32 */
static void forward_rows(void *out, int out16, ds_half h, float *mean, float *rstd,
                         const float *inp, const float *weight, const float *bias, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C > DS_PAR_MIN)
    for (int n = 0; n < N; n++)
        forward_row(out16 ? NULL : (float *)out + (size_t)n * C,
                    out16 ? (uint16_t *)out + (size_t)n * C : NULL, h, mean ? mean + n : NULL,
                    rstd ? rstd + n : NULL, inp + (size_t)n * C, weight, bias, C, eps);
}

void ds_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps) {
    forward_rows(out, 0, DS_HALF_BF16, mean, rstd, inp, weight, bias, N, C, eps);
}

DS_SIMD static void dinp_row(float *dx, int acc, const float *dy, const float *x,
                             const float *weight, float m, float s, int C) {
    float a1[DS_LANES] = {0}, a2[DS_LANES] = {0};
    int i = 0, tail = C - C % DS_LANES;
    for (; i < tail; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) {
            float dn = (weight ? weight[i + j] : 1.0f) * dy[i + j];
            a1[j] += dn;
            a2[j] += dn * (x[i + j] - m) * s;
        }
    float dnorm_mean = lane_sum(a1), dnorm_norm_mean = lane_sum(a2);
    for (; i < C; i++) {
        float dn = (weight ? weight[i] : 1.0f) * dy[i];
        dnorm_mean += dn;
        dnorm_norm_mean += dn * (x[i] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    if (acc)
        for (i = 0; i < C; i++)
            dx[i] += ds_km_layernorm_dx1(x[i], dy[i], weight ? weight[i] : 1.0f, m, s, dnorm_mean,
                                         dnorm_norm_mean);
    else
        for (i = 0; i < C; i++)
            dx[i] = ds_km_layernorm_dx1(x[i], dy[i], weight ? weight[i] : 1.0f, m, s, dnorm_mean,
                                        dnorm_norm_mean);
}

DS_SIMD static void dparams_cols(float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *mean, const float *rstd, int N,
                                 int C, int c0, int c1) {
    enum { COLS = 128 };
    float dw[COLS], db[COLS];
    for (int c = 0; c < c1 - c0; c++) dw[c] = db[c] = 0.0f;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C + c0;
        const float *dy = dout + (size_t)n * C + c0;
        float m = mean[n], s = rstd[n];
        for (int c = 0; c < c1 - c0; c++) {
            dw[c] += (x[c] - m) * s * dy[c];
            db[c] += dy[c];
        }
    }
    for (int c = c0; c < c1; c++) {
        if (dweight) dweight[c] += dw[c - c0];
        if (dbias) dbias[c] += db[c - c0];
    }
}

void ds_layernorm_backward(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int N, int C) {
    int big = (size_t)N * C > DS_PAR_MIN;
    if (dinp) {
#pragma omp parallel for schedule(dynamic, 8) if (big)
        for (int n = 0; n < N; n++)
            dinp_row(dinp + (size_t)n * C, acc, dout + (size_t)n * C, inp + (size_t)n * C, weight,
                     mean[n], rstd[n], C);
    }
    if (dweight || dbias) {
#pragma omp parallel for schedule(static) if (big)
        for (int c0 = 0; c0 < C; c0 += 128)
            dparams_cols(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                         c0 + 128 < C ? c0 + 128 : C);
    }
}

/* ---- 16-bit weight and bias (kernel_table.h's layernorm16 pair) -----------------------
 * C floats each in the workspace: the kernels above run on the widened parameters and
 * sum the parameter gradients in fp32, which are then added with one rounding. */

void ds_layernorm16_forward(ds_half h, void *out, float *mean, float *rstd, const float *inp,
                            const uint16_t *weight, const uint16_t *bias, int N, int C,
                            float eps, int out16, void *ws) {
    float *w = ws, *b = (float *)((char *)ws + ds_ws_part((size_t)C * 4));
    ds_half_to_f32(h, w, weight, (size_t)C);
    ds_half_to_f32(h, b, bias, (size_t)C);
    forward_rows(out, out16, h, mean, rstd, inp, w, b, N, C, eps);
}

void ds_layernorm16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                             const float *dout, const float *inp, const uint16_t *weight,
                             const float *mean, const float *rstd, int N, int C, void *ws) {
    size_t part = ds_ws_part((size_t)C * 4);
    float *w = ws, *dw = (float *)((char *)ws + part), *db = (float *)((char *)ws + 2 * part);
    ds_half_to_f32(h, w, weight, (size_t)C);
    memset(dw, 0, (size_t)C * sizeof *dw);
    memset(db, 0, (size_t)C * sizeof *db);
    ds_layernorm_backward(dinp, acc, dweight ? dw : NULL, dbias ? db : NULL, dout, inp, w, mean,
                          rstd, N, C);
    if (dweight) ds_half_acc_f32(h, dweight, dw, (size_t)C);
    if (dbias) ds_half_acc_f32(h, dbias, db, (size_t)C);
}
