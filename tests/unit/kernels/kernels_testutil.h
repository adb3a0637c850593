/* Helpers shared by the kernel tests: a seeded generator, float/double buffers, tolerant
 * comparison, and central finite differences of a double-precision forward. */
#ifndef KERNELS_TESTUTIL_H
#define KERNELS_TESTUTIL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint64_t tu_state = 0x9E3779B97F4A7C15ull;

static inline void tu_seed(uint64_t s) { tu_state = s * 0x9E3779B97F4A7C15ull + 1; }

static inline double tu_uniform(void) { /* [0,1), splitmix64 */
    uint64_t z = (tu_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static inline float *tu_randf(size_t n, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)tu_uniform();
    return x;
}

static inline float *tu_copyf(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static inline double *tu_to_double(const float *x, size_t n) {
    double *y = calloc(n ? n : 1, sizeof *y); /* calloc: gcc -O2 -fsanitize warns on y[0] when n == 0 */
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

/* Fails (returns the index + 1 of the first mismatch, printing it) when
 * |got - want| > atol + rtol * |want|. */
static inline size_t tu_mismatch(const char *what, const float *got, const double *want,
                                 size_t n, double atol, double rtol) {
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (!(err <= atol + rtol * fabs(want[i]))) {
            fprintf(stderr, "%s[%zu]: got %.9g want %.9g (err %.3g)\n", what, i, got[i],
                    want[i], err);
            return i + 1;
        }
    }
    return 0;
}

/* A forward in double: y = f(x), x and y flat. */
typedef void (*tu_fwd)(const double *x, double *y, const void *ctx);

/* grad[i] = d/dx_i sum_j g[j] * f(x)[j], by central differences. */
static inline void tu_fd_grad(tu_fwd f, const void *ctx, const double *x, size_t nx,
                              const double *g, size_t ny, double *grad) {
    double *xp = malloc(nx * sizeof *xp), *y = malloc(ny * sizeof *y);
    memcpy(xp, x, nx * sizeof *xp);
    for (size_t i = 0; i < nx; i++) {
        double h = 1e-6 * (fabs(x[i]) > 1.0 ? fabs(x[i]) : 1.0);
        double lp = 0.0, lm = 0.0;
        xp[i] = x[i] + h;
        f(xp, y, ctx);
        for (size_t j = 0; j < ny; j++) lp += g[j] * y[j];
        xp[i] = x[i] - h;
        f(xp, y, ctx);
        for (size_t j = 0; j < ny; j++) lm += g[j] * y[j];
        xp[i] = x[i];
        grad[i] = (lp - lm) / (2.0 * h);
    }
    free(xp);
    free(y);
}

/* d/dt sum_j g[j] * f(x + t*d)[j] at t = 0: one directional derivative, for shapes too
 * large to difference element by element. */
static inline double tu_fd_dir(tu_fwd f, const void *ctx, const double *x, const double *d,
                               size_t nx, const double *g, size_t ny) {
    double *xp = malloc(nx * sizeof *xp), *y = malloc(ny * sizeof *y);
    double h = 1e-5, lp = 0.0, lm = 0.0;
    for (size_t i = 0; i < nx; i++) xp[i] = x[i] + h * d[i];
    f(xp, y, ctx);
    for (size_t j = 0; j < ny; j++) lp += g[j] * y[j];
    for (size_t i = 0; i < nx; i++) xp[i] = x[i] - h * d[i];
    f(xp, y, ctx);
    for (size_t j = 0; j < ny; j++) lm += g[j] * y[j];
    free(xp);
    free(y);
    return (lp - lm) / (2.0 * h);
}

/* ds_dropout_forward on ones: the mask (keep scale or 0) key draws for n elements */
static inline float *tu_dropout_of_ones(size_t n, float p, ds_rng_key key) {
    float *one = malloc(n * sizeof *one), *out = malloc(n * sizeof *out);
    for (size_t i = 0; i < n; i++) one[i] = 1.0f;
    ds_dropout_forward(out, one, n, p, key);
    free(one);
    return out;
}

#endif
