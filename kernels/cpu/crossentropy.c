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

/* x[i] = exp(x[i] - shift) in place; returns the sum (same order as row_sumexp). */
DS_SIMD static float row_exp_inplace(float *x, float shift, int V) {
    float acc[DS_LANES] = {0};
    int i = 0;
    for (; i + DS_LANES <= V; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) {
            float e = ds_km_expf(x[i + j] - shift);
            x[i + j] = e;
            acc[j] += e;
        }
    float s = 0.0f;
    for (int j = 0; j < DS_LANES; j++) s += acc[j];
    for (; i < V; i++) {
        float e = ds_km_expf(x[i] - shift);
        x[i] = e;
        s += e;
    }
    return s;
}

/* dx[i] += scale * exp(x[i] - lse) */
DS_SIMD static void row_add_softmax(float *dx, const float *x, float lse, float scale, int V) {
    for (int i = 0; i < V; i++) dx[i] += scale * ds_km_expf(x[i] - lse);
}

DS_SIMD static void row_scale(float *x, float s, int V) {
    for (int i = 0; i < V; i++) x[i] *= s;
}

static float row_logsumexp(const float *x, int V) {
    float m = row_max(x, V);
    return m + logf(row_sumexp(x, m, V));
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
        if (targets[n] < 0) continue;
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        row_add_softmax(dx, x, row_logsumexp(x, V), dloss, V);
        dx[targets[n]] -= dloss;
    }
}

double ds_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                        const int32_t *targets, float dloss, int N, int V) {
#pragma omp parallel for schedule(dynamic) if ((size_t)N * V > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        int tg = targets[n];
        if (tg < 0) {
            losses[n] = 0.0f;
            for (int i = 0; i < V; i++) dx[i] = 0.0f;
            continue;
        }
        float x_target = x[tg]; /* read before dx (maybe x itself) is overwritten */
        float m = row_max(x, V);
        if (dx != x) memcpy(dx, x, (size_t)V * sizeof *dx);
        float sum = row_exp_inplace(dx, m, V);
        losses[n] = m + logf(sum) - x_target;
        row_scale(dx, dloss / sum, V);
        dx[tg] -= dloss;
    }
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return total;
}
