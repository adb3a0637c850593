/* The shared per-element helpers (kernel_math.h) reproduce the CPU kernels: Philox and
 * the dropout mask, bf16/fp16 rounding bit for bit; GELU, AdamW, SGD and LayerNorm to a
 * few ulps (the CPU's SIMD clones may contract a*b+c into FMAs). Each helper is driven
 * the way the CUDA kernel drives it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernel_math.h"
#include "kernels.h"

static uint64_t g_rng = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}
static float rndf(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() >> 8) / 16777216.0f; }

static float *randv(size_t n, float lo, float hi) {
    float *p = malloc(n * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) p[i] = rndf(lo, hi);
    return p;
}

static void assert_close(float got, float want, float atol, float rtol) {
    if (!(fabsf(got - want) <= atol + rtol * fabsf(want)))
        fail_msg("got %.9g want %.9g (atol %g rtol %g)", got, want, atol, rtol);
}

static void test_philox_matches_cpu(void **state) {
    (void)state;
    for (int i = 0; i < 10000; i++) {
        uint32_t ctr[4] = {rnd(), rnd(), rnd(), rnd()}, key[2] = {rnd(), rnd()}, want[4];
        ds_philox4x32(want, ctr, key);
        ds_km_philox4x32_10(ctr, key);
        assert_memory_equal(ctr, want, sizeof want);
    }
}

/* the CUDA dropout kernel's loop, run on the host */
static void dropout_like_gpu(float *dst, const float *src, size_t n, float p, ds_rng_key key) {
    uint32_t thresh = ds_km_drop_threshold(p), k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    float keep = ds_km_keep_scale(p);
    for (size_t blk = 0; blk < (n + 3) / 4; blk++) {
        uint32_t r[4] = {(uint32_t)blk, key.step, key.layer, key.micro};
        ds_km_philox4x32_10(r, k);
        for (int j = 0; j < 4 && blk * 4 + (size_t)j < n; j++)
            dst[blk * 4 + j] = ds_km_dropout1(src[blk * 4 + j], r[j], p, thresh, keep);
    }
}

static void test_dropout_mask_matches_cpu(void **state) {
    (void)state;
    const float ps[] = {0.1f, 0.5f, 0.9f, 1.0f};
    size_t n = 100003;
    float *x = randv(n, -1, 1), *a = malloc(n * 4), *b = malloc(n * 4);
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        ds_rng_key key = {0xFEDCBA9876543210ull + k, 11, 5, 2, 0};
        ds_dropout_forward(a, x, n, ps[k], key);
        dropout_like_gpu(b, x, n, ps[k], key);
        assert_memory_equal(a, b, n * 4);
    }
    free(x), free(a), free(b);
}

static int is_nan16(uint16_t h, int f16) {
    uint16_t e = f16 ? 0x7C00u : 0x7F80u, m = f16 ? 0x03FFu : 0x007Fu;
    return (h & e) == e && (h & m);
}

static void test_conversions_match_cpu(void **state) {
    (void)state;
    size_t n = 1 << 18;
    float *x = malloc(n * 4), *back = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = rnd();
        memcpy(&x[i], &u, 4);
    }
    ds_f32_to_bf16(h, x, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t mine = ds_km_f32_to_bf16(x[i]);
        if (!(is_nan16(mine, 0) && is_nan16(h[i], 0))) assert_int_equal(mine, h[i]);
    }
    ds_f32_to_f16(h, x, n);
    for (size_t i = 0; i < n; i++) {
        uint16_t mine = ds_km_f32_to_f16(x[i]);
        if (!(is_nan16(mine, 1) && is_nan16(h[i], 1))) assert_int_equal(mine, h[i]);
    }
    uint16_t *all = malloc(65536 * 2);
    for (uint32_t i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    ds_f16_to_f32(back, all, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float mine = ds_km_f16_to_f32((uint16_t)i);
        if (!(isnan(mine) && isnan(back[i]))) assert_memory_equal(&mine, &back[i], 4);
    }
    ds_bf16_to_f32(back, all, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float mine = ds_km_bf16_to_f32((uint16_t)i);
        assert_memory_equal(&mine, &back[i], 4);
    }
    free(x), free(back), free(h), free(all);
}

static void test_gelu_matches_cpu(void **state) {
    (void)state;
    size_t n = 100000;
    float *x = randv(n, -8, 8), *dy = randv(n, -1, 1), *y = malloc(n * 4), *dx = calloc(n, 4);
    ds_gelu_forward(y, x, n);
    ds_gelu_backward(dx, 1, x, dy, n);
    for (size_t i = 0; i < n; i++) {
        assert_close(ds_km_gelu_fwd(x[i]), y[i], 1e-7f, 1e-6f);
        assert_close(ds_km_gelu_grad(x[i]) * dy[i], dx[i], 1e-7f, 1e-5f);
    }
    for (int i = -200; i <= 200; i++) { /* exp's range ends: no NaN or inf */
        float v = (float)i;
        assert_true(isfinite(ds_km_gelu_fwd(v)) && isfinite(ds_km_gelu_grad(v)));
    }
    free(x), free(dy), free(y), free(dx);
}

static void test_optimizers_match_cpu(void **state) {
    (void)state;
    size_t n = 50000;
    float *p = randv(n, -1, 1), *g = randv(n, -1, 1), *m = randv(n, -0.1f, 0.1f);
    float *v = randv(n, 0, 0.01f);
    float *p2 = malloc(n * 4), *m2 = malloc(n * 4), *v2 = malloc(n * 4);
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4), memcpy(v2, v, n * 4);
    for (int t = 1; t <= 3; t++) {
        ds_adamw_update_scaled(p, g, 0.5f, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        ds_km_adamw k = ds_km_adamw_consts(6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        for (size_t i = 0; i < n; i++) ds_km_adamw1(&p2[i], g[i], &m2[i], &v2[i], &k);
    }
    for (size_t i = 0; i < n; i++) {
        assert_close(p2[i], p[i], 1e-7f, 1e-6f);
        assert_close(m2[i], m[i], 1e-8f, 1e-6f);
        assert_close(v2[i], v[i], 1e-10f, 1e-6f);
    }
    memcpy(p2, p, n * 4), memcpy(m2, m, n * 4); /* m as the momentum buffer */
    for (int t = 0; t < 3; t++) {
        ds_sgd_update(p, g, m, n, 0.01f, 0.9f, 1e-4f);
        for (size_t i = 0; i < n; i++) ds_km_sgd1(&p2[i], g[i], &m2[i], 0.01f, 0.9f, 1e-4f);
        ds_sgd_update(p, g, NULL, n, 0.01f, 0.0f, 1e-4f);
        for (size_t i = 0; i < n; i++) ds_km_sgd1(&p2[i], g[i], NULL, 0.01f, 0.0f, 1e-4f);
    }
    for (size_t i = 0; i < n; i++) {
        assert_close(p2[i], p[i], 1e-7f, 1e-6f);
        assert_close(m2[i], m[i], 1e-7f, 1e-6f);
    }
    free(p), free(g), free(m), free(v), free(p2), free(m2), free(v2);
}

static void test_layernorm_pieces_match_cpu(void **state) {
    (void)state;
    int N = 16, C = 200;
    size_t NC = (size_t)N * C;
    float *x = randv(NC, -2, 3), *w = randv(C, 0.5f, 1.5f), *b = randv(C, -1, 1);
    float *dy = randv(NC, -1, 1), *y = malloc(NC * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *dx = calloc(NC, 4);
    ds_layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    ds_layernorm_backward(dx, 1, NULL, NULL, dy, x, w, mean, rstd, N, C);
    for (int n = 0; n < N; n++) {
        const float *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
        double a1 = 0, a2 = 0;
        for (int i = 0; i < C; i++) {
            a1 += (double)w[i] * dyr[i];
            a2 += (double)w[i] * dyr[i] * (xr[i] - mean[n]) * rstd[n];
        }
        float dm = (float)(a1 / C), dnm = (float)(a2 / C);
        for (int i = 0; i < C; i++) {
            size_t k = (size_t)n * C + i;
            assert_close(ds_km_layernorm1(xr[i], mean[n], rstd[n], w[i], b[i]), y[k], 1e-6f, 1e-6f);
            assert_close(ds_km_layernorm_dx1(xr[i], dyr[i], w[i], mean[n], rstd[n], dm, dnm), dx[k],
                         1e-5f, 1e-4f);
        }
    }
    free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd), free(dx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_matches_cpu),
        cmocka_unit_test(test_dropout_mask_matches_cpu),
        cmocka_unit_test(test_conversions_match_cpu),
        cmocka_unit_test(test_gelu_matches_cpu),
        cmocka_unit_test(test_optimizers_match_cpu),
        cmocka_unit_test(test_layernorm_pieces_match_cpu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
