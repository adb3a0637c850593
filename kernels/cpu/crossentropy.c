/* Softmax cross-entropy over vocabulary rows. Rows are independent, so threads split the
 * rows; totals are summed afterwards in row order (same bits for any thread count). A row
 * of GPT-2's vocabulary (50257 floats, 200 KB) stays in L2 between the passes over it. */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "simd.h"

DS_SIMD static float row_max(const float *x, int V) {
    float acc[DS_LANES];
    for (int j = 0; j < DS_LANES; j++) acc[j] = -INFINITY;
    int i = 0;
    for (; i + DS_LANES <= V; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = -INFINITY;
    for (int j = 0; j < DS_LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < V; i++) m = x[i] > m ? x[i] : m;
    return m;
}

DS_SIMD static float row_sumexp(const float *x, float shift, int V) {
    float acc[DS_LANES] = {0};
    int i = 0;
    for (; i + DS_LANES <= V; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] += ds_km_expf(x[i + j] - shift);
    float s = 0.0f;
    for (int j = 0; j < DS_LANES; j++) s += acc[j];
    for (; i < V; i++) s += ds_km_expf(x[i] - shift);
    return s;
}

/* dx[i] = scale * exp(x[i] - lse); dx may be x (each element is read before it is
 * written, by the same iteration). */
DS_SIMD static void row_softmax_scaled(float *dx, const float *x, float lse, float scale, int V) {
    for (int i = 0; i < V; i++) dx[i] = scale * ds_km_expf(x[i] - lse);
}

static float row_logsumexp(const float *x, int V) {
    float m = row_max(x, V);
    return m + logf(row_sumexp(x, m, V));
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
