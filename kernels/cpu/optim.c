/* Optimizer steps on a slice of a flat buffer, elementwise (PyTorch's formulas, written
 * once in kernel_math.h for both backends), plus the sum of squares for the global
 * gradient norm. These stream hundreds of MB per step, so they run as SIMD-cloned range
 * workers over fixed chunks on all threads. */
#include "half_block.h"
#include "kernels.h"
#include "simd.h"

#define CHUNK 16384
/* 16-bit paths widen this many elements at a time into a stack buffer. */
#define HBLOCK 1024

DS_SIMD static void adamw_range(float *param, const float *grad, float *m, float *v, size_t n,
                                ds_km_adamw k) {
    for (size_t i = 0; i < n; i++) ds_km_adamw1(param + i, grad[i], m + i, v + i, &k);
}

void ds_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t) {
    ds_adamw_update_scaled(param, grad, 1.0f, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}

void ds_adamw_update_scaled(float *param, const float *grad, float grad_scale, float *m,
                            float *v, size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 2)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, len = lo + CHUNK < n ? CHUNK : n - lo;
        adamw_range(param + lo, grad + lo, m + lo, v + lo, len, k);
    }
}

DS_SIMD static void sgd_range(float *param, const float *grad, float *buf, size_t n, float lr,
                              float momentum, float weight_decay) {
    if (momentum != 0.0f) {
        for (size_t i = 0; i < n; i++)
            ds_km_sgd1(param + i, grad[i], buf + i, lr, momentum, weight_decay);
    } else {
        for (size_t i = 0; i < n; i++)
            ds_km_sgd1(param + i, grad[i], NULL, lr, 0.0f, weight_decay);
    }
}

void ds_sgd_update(float *param, const float *grad, float *buf, size_t n, float lr,
                   float momentum, float weight_decay) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 2)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, len = lo + CHUNK < n ? CHUNK : n - lo;
        sgd_range(param + lo, grad + lo, buf ? buf + lo : NULL, len, lr, momentum,
                  weight_decay);
    }
}

DS_SIMD static double sumsq_range(const float *x, size_t n) {
    double acc[DS_LANES] = {0};
    size_t i = 0;
    for (; i + DS_LANES <= n; i += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] += (double)x[i + j] * x[i + j];
    for (; i < n; i++) acc[0] += (double)x[i] * x[i];
    double s = 0.0;
    for (int j = 0; j < DS_LANES; j++) s += acc[j];
    return s;
}

/* One chunk of a 16-bit buffer: widened block by block, the block sums in order. */
static double half_sumsq_range(ds_half h, const uint16_t *x, size_t n) {
    float b[HBLOCK];
    double s = 0.0;
    for (size_t i = 0; i < n; i += HBLOCK) {
        size_t k = n - i < HBLOCK ? n - i : HBLOCK;
        ds_half_widen(h, b, x + i, k);
        s += sumsq_range(b, k);
    }
    return s;
}

/* Fixed-size chunks, each summed by sumsq_range, then the chunk sums in chunk order: the
 * result is the same for any thread count. One body for both sums of squares: x is float
 * or uint16_t per h (h < 0: fp32). */
static double sumsq_chunks(int h, const void *x, size_t n) {
    enum { MAXCHUNKS = 4096 };
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    double partial[MAXCHUNKS];
    double total = 0.0;
    for (size_t base = 0; base < nchunks; base += MAXCHUNKS) {
        size_t cnt = nchunks - base < MAXCHUNKS ? nchunks - base : MAXCHUNKS;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN)
        for (size_t c = 0; c < cnt; c++) {
            size_t lo = (base + c) * CHUNK;
            size_t len = lo + CHUNK < n ? CHUNK : n - lo;
            partial[c] = h < 0 ? sumsq_range((const float *)x + lo, len)
                               : half_sumsq_range((ds_half)h, (const uint16_t *)x + lo, len);
        }
        for (size_t c = 0; c < cnt; c++) total += partial[c];
    }
    return total;
}

double ds_sumsq(const float *x, size_t n) { return sumsq_chunks(-1, x, n); }

double ds_half_sumsq(ds_half h, const uint16_t *x, size_t n) { return sumsq_chunks((int)h, x, n); }

/* ---- steps on a 16-bit working copy ------------------------------------------------- */
/* The fp32 step on the master weights with the gradients widened block by block, then
 * the updated masters rounded into the working copy: the same update as the fp32 path
 * would make from the same (16-bit) gradients. */

static void adamw_half_range(ds_half h, uint16_t *w, const uint16_t *grad, float *master,
                             float *m, float *v, size_t n, ds_km_adamw k) {
    float g[HBLOCK];
    for (size_t i = 0; i < n; i += HBLOCK) {
        size_t len = n - i < HBLOCK ? n - i : HBLOCK;
        ds_half_widen(h, g, grad + i, len);
        adamw_range(master + i, g, m + i, v + i, len, k);
        ds_half_narrow(h, w + i, master + i, len);
    }
}

void ds_adamw_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                          float *master, float *m, float *v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t) {
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 2)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, len = lo + CHUNK < n ? CHUNK : n - lo;
        adamw_half_range(h, w + lo, grad + lo, master + lo, m + lo, v + lo, len, k);
    }
}

void ds_adamw_spans(float *param, const float *grad, float grad_scale, float *m, float *v,
                    const ds_decay_span *spans, int nspans, float lr, float beta1, float beta2,
                    float eps, int t) {
    for (int i = 0; i < nspans; i++) {
        size_t o = spans[i].off;
        ds_adamw_update_scaled(param + o, grad + o, grad_scale, m + o, v + o, spans[i].n, lr,
                               beta1, beta2, eps, spans[i].weight_decay, t);
    }
}

void ds_adamw_half_spans(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                         float *master, float *m, float *v, const ds_decay_span *spans,
                         int nspans, float lr, float beta1, float beta2, float eps, int t) {
    for (int i = 0; i < nspans; i++) {
        size_t o = spans[i].off;
        ds_adamw_update_half(h, w + o, grad + o, grad_scale, master + o, m + o, v + o,
                             spans[i].n, lr, beta1, beta2, eps, spans[i].weight_decay, t);
    }
}

static void sgd_half_range(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                           float *master, float *buf, size_t n, float lr, float momentum,
                           float weight_decay) {
    float g[HBLOCK];
    for (size_t i = 0; i < n; i += HBLOCK) {
        size_t len = n - i < HBLOCK ? n - i : HBLOCK;
        ds_half_widen(h, g, grad + i, len);
        if (grad_scale != 1.0f)
            for (size_t j = 0; j < len; j++) g[j] *= grad_scale;
        sgd_range(master + i, g, buf ? buf + i : NULL, len, lr, momentum, weight_decay);
        ds_half_narrow(h, w + i, master + i, len);
    }
}

void ds_sgd_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                        float *master, float *buf, size_t n, float lr, float momentum,
                        float weight_decay) {
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(dynamic) if (n > DS_PAR_MIN / 2)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, len = lo + CHUNK < n ? CHUNK : n - lo;
        sgd_half_range(h, w + lo, grad + lo, grad_scale, master + lo, buf ? buf + lo : NULL,
                       len, lr, momentum, weight_decay);
    }
}
