/* Softmax cross-entropy over vocabulary rows. Rows are independent, so threads split the
 * rows; totals are summed afterwards in row order (same bits for any thread count). A row
 * of GPT-2's vocabulary (50257 floats, 200 KB) stays in L2 between the passes over it.
 *
 * 16-bit logits go through the same lane sums on blocks widened on the stack (a block is
 * a multiple of DS_LANES, so every element lands in the lane it has in the fp32 row):
 * the statistics and losses have the fp32 kernels' bits on the widened row, and the
 * gradient is the fp32 one rounded once per element, with no fp32 copy of a row. */
#include <math.h>
#include <string.h>

#include "half_block.h"
#include "kernels.h"
#include "simd.h"

enum { BLOCK = 32 * DS_LANES }; /* the elements of a 16-bit row widened at a time */

/* acc[j] = max(acc[j], x[i + j]) over n elements, n a multiple of DS_LANES */
DS_SIMD static void lanes_max(float *acc, const float *x, int n) {
    for (int i = 0; i < n; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
}

DS_SIMD static void lanes_sumexp(float *acc, const float *x, float shift, int n) {
    for (int i = 0; i < n; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] += ds_km_expf(x[i + j] - shift);
}

/* the lanes' max, then the tail's elements (fewer than DS_LANES) one by one */
DS_SIMD static float max_end(const float *acc, const float *tail, int n) {
    float m = -INFINITY;
    for (int j = 0; j < DS_LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (int i = 0; i < n; i++) m = tail[i] > m ? tail[i] : m;
    return m;
}

DS_SIMD static float sumexp_end(const float *acc, const float *tail, float shift, int n) {
    float s = 0.0f;
    for (int j = 0; j < DS_LANES; j++) s += acc[j];
    for (int i = 0; i < n; i++) s += ds_km_expf(tail[i] - shift);
    return s;
}

static float row_logsumexp(const float *x, int V) {
    int body = V / DS_LANES * DS_LANES;
    float acc[DS_LANES];
    for (int j = 0; j < DS_LANES; j++) acc[j] = -INFINITY;
    lanes_max(acc, x, body);
    float m = max_end(acc, x + body, V - body);
    for (int j = 0; j < DS_LANES; j++) acc[j] = 0.0f;
    lanes_sumexp(acc, x, m, body);
    return m + logf(sumexp_end(acc, x + body, m, V - body));
}

/* dx[i] = scale * exp(x[i] - lse); dx may be x (each element is read before it is
 * written, by the same iteration). */
DS_SIMD static void row_softmax_scaled(float *dx, const float *x, float lse, float scale, int V) {
    for (int i = 0; i < V; i++) dx[i] = scale * ds_km_expf(x[i] - lse);
}

/* One row's gradient, written over dx (which may be x): the same arithmetic for backward
 * and for forward_backward, so both give the same bits. */
static void row_grad(float *dx, const float *x, float lse, int target, float dloss, int V) {
    if (target < 0) {
        memset(dx, 0, (size_t)V * sizeof *dx);
        return;
    }
    row_softmax_scaled(dx, x, lse, dloss, V);
    dx[target] -= dloss;
}

double ds_crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                               int N, int V) {
#pragma omp parallel for schedule(dynamic) if ((size_t)N * V > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        losses[n] = targets[n] < 0 ? 0.0f : row_logsumexp(x, V) - x[targets[n]];
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return total;
}

void ds_crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                              float dloss, int N, int V) {
#pragma omp parallel for schedule(dynamic) if ((size_t)N * V > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        row_grad(dlogits + (size_t)n * V, x, targets[n] < 0 ? 0.0f : row_logsumexp(x, V),
                 targets[n], dloss, V);
    }
}

double ds_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                        const int32_t *targets, float dloss, int N, int V) {
#pragma omp parallel for schedule(dynamic) if ((size_t)N * V > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        int tg = targets[n];
        float lse = tg < 0 ? 0.0f : row_logsumexp(x, V);
        losses[n] = tg < 0 ? 0.0f : lse - x[tg]; /* before the row (maybe x) is overwritten */
        row_grad(dlogits + (size_t)n * V, x, lse, tg, dloss, V);
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return total;
}

/* ---- 16-bit logits -------------------------------------------------------------------- */

/* row_logsumexp of the widened row x, block by block */
static float row_logsumexp16(ds_half h, const uint16_t *x, int V) {
    int body = V / DS_LANES * DS_LANES;
    float acc[DS_LANES], b[BLOCK], tail[DS_LANES];
    ds_half_widen(h, tail, x + body, (size_t)(V - body));
    for (int j = 0; j < DS_LANES; j++) acc[j] = -INFINITY;
    for (int i = 0; i < body; i += BLOCK) {
        int k = body - i < BLOCK ? body - i : BLOCK;
        ds_half_widen(h, b, x + i, (size_t)k);
        lanes_max(acc, b, k);
    }
    float m = max_end(acc, tail, V - body);
    for (int j = 0; j < DS_LANES; j++) acc[j] = 0.0f;
    for (int i = 0; i < body; i += BLOCK) {
        int k = body - i < BLOCK ? body - i : BLOCK;
        ds_half_widen(h, b, x + i, (size_t)k);
        lanes_sumexp(acc, b, m, k);
    }
    return m + logf(sumexp_end(acc, tail, m, V - body));
}

/* row_grad on the widened row x, each block rounded into dx (which may be x) */
static void row_grad16(ds_half h, uint16_t *dx, const uint16_t *x, float lse, int target,
                       float dloss, int V) {
    if (target < 0) {
        memset(dx, 0, (size_t)V * sizeof *dx); /* +0 in bf16 and fp16 alike */
        return;
    }
    float b[BLOCK];
    for (int i = 0; i < V; i += BLOCK) {
        int k = V - i < BLOCK ? V - i : BLOCK;
        ds_half_widen(h, b, x + i, (size_t)k);
        row_softmax_scaled(b, b, lse, dloss, k);
        if (target >= i && target < i + k) b[target - i] -= dloss;
        ds_half_narrow(h, dx + i, b, (size_t)k);
    }
}

double ds_crossentropy16(ds_half h, float *losses, uint16_t *dlogits, const uint16_t *logits,
                         const int32_t *targets, float dloss, int N, int V) {
#pragma omp parallel for schedule(dynamic) if ((size_t)N * V > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const uint16_t *x = logits + (size_t)n * V;
        int tg = targets[n];
        float lse = tg < 0 ? 0.0f : row_logsumexp16(h, x, V), xt = 0.0f;
        if (tg >= 0) ds_half_widen(h, &xt, x + tg, 1); /* before the row (maybe x) is overwritten */
        if (losses) losses[n] = tg < 0 ? 0.0f : lse - xt;
        if (dlogits) row_grad16(h, dlogits + (size_t)n * V, x, lse, tg, dloss, V);
    }
    double total = 0.0;
    for (int n = 0; losses && n < N; n++) total += losses[n];
    return total;
}
