/* The fused attention pair (attention_fused.c) against the reference kernels
 * (attention.c), without dropout and with it (against the _dropout pair): forward's out
 * with the reference's bits and lse against a double-precision log-sum-exp of the
 * undropped scores; backward's dqkv added onto a non-zero buffer, within rounding of the
 * reference's. Shapes cover T below, at and past a multiple of the backward's chunk of
 * rows and of the register tiles, and head sizes that are not. The dropout mask's
 * mapping (kernel_math.h, shared with the CUDA kernels) is checked against
 * ds_dropout_forward's draws for the whole [B,NH,T,T] tensor. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel_math.h"
#include "kernels.h"
#include "kernels_testutil.h"

static const ds_rng_key KEY = {.seed = 0xD5A7ull << 32 | 99, .step = 4, .layer = 6, .micro = 1,
                               .offset = 2 * 3 * 19 * 19 + 1}; /* not a multiple of 4 */

#define LSE_TOL 1e-5
#define BWD_ATOL 1e-5
#define BWD_RTOL 1e-4

/* lse[b,h,t] = log sum_{u<=t} exp(q_t.k_u / sqrt(hs)), in double */
static double *ref_lse(const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double *lse = malloc((size_t)B * NH * T * sizeof *lse), scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                double s[T], m = -INFINITY, sum = 0.0;
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + (size_t)h * hs;
                    s[u] = 0.0;
                    for (int i = 0; i < hs; i++) s[u] += (double)q[i] * k[i];
                    s[u] *= scale;
                    m = s[u] > m ? s[u] : m;
                }
                for (int u = 0; u <= t; u++) sum += exp(s[u] - m);
                lse[((size_t)b * NH + h) * T + t] = m + log(sum);
            }
    return lse;
}

static void check_fused(int B, int T, int C, int NH, float p) {
    tu_seed((uint64_t)(B * 1000003 + T * 1009 + C * 31 + NH));
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    float *qkv = tu_randf(nx, -2.0f, 2.0f), *dout = tu_randf(ny, -1.0f, 1.0f);
    float *base = tu_randf(nx, -0.5f, 0.5f);
    float *out_ref = tu_randf(ny, 0, 1), *att = tu_randf(na, 0, 1), *scratch = tu_randf(na, 0, 1);
    float *out = tu_randf(ny, 0, 1), *lse = tu_randf(nl, 0, 1);
    float *g_ref = tu_copyf(base, nx), *g = tu_copyf(base, nx);

    if (p > 0.0f)
        ds_attention_forward_dropout(out_ref, att, qkv, B, T, C, NH, p, KEY);
    else
        ds_attention_forward(out_ref, att, qkv, B, T, C, NH);
    ds_attention_forward_fused(out, lse, qkv, B, T, C, NH, p, KEY);
    assert_memory_equal(out, out_ref, ny * sizeof(float));
    double *want_lse = ref_lse(qkv, B, T, C, NH);
    assert_int_equal(tu_mismatch("lse", lse, want_lse, nl, LSE_TOL, LSE_TOL), 0);

    if (p > 0.0f)
        ds_attention_backward_dropout(g_ref, 1, scratch, dout, qkv, att, B, T, C, NH, p, KEY);
    else
        ds_attention_backward(g_ref, 1, scratch, dout, qkv, att, B, T, C, NH);
    ds_attention_backward_fused(g, 1, dout, qkv, lse, B, T, C, NH, p, KEY);
    double *want = tu_to_double(g_ref, nx);
    assert_int_equal(tu_mismatch("fused dqkv", g, want, nx, BWD_ATOL, BWD_RTOL), 0);
    /* the same call gives the same bits */
    float *g2 = tu_copyf(base, nx);
    ds_attention_backward_fused(g2, 1, dout, qkv, lse, B, T, C, NH, p, KEY);
    assert_memory_equal(g, g2, nx * sizeof(float));

    free(qkv), free(dout), free(base), free(out_ref), free(att), free(scratch), free(out);
    free(lse), free(g_ref), free(g), free(g2), free(want_lse), free(want);
}

static void test_fused_small(void **state) {
    (void)state;
    check_fused(1, 1, 4, 1, 0.0f);
    check_fused(2, 5, 8, 2, 0.0f);
    check_fused(1, 7, 12, 3, 0.0f);
    check_fused(3, 19, 48, 4, 0.0f); /* head size 12: not a multiple of the tile width */
}

static void test_fused_chunks(void **state) {
    (void)state;
    check_fused(1, 64, 64, 1, 0.0f);   /* exactly one chunk of rows */
    check_fused(2, 67, 96, 3, 0.0f);   /* one chunk and 3 rows: not a multiple of the tiles */
    check_fused(1, 130, 128, 2, 0.0f); /* three chunks, the last of 2 rows; head size 64 */
    check_fused(2, 200, 80, 2, 0.0f);  /* head size 40 */
}

static void test_fused_dropout(void **state) {
    (void)state;
    check_fused(1, 1, 4, 1, 0.1f);
    check_fused(2, 5, 8, 2, 0.5f);
    check_fused(3, 19, 48, 4, 0.1f);
    check_fused(2, 67, 96, 3, 0.1f);   /* past a chunk, tails everywhere */
    check_fused(1, 130, 128, 2, 0.2f); /* three chunks */
    check_fused(2, 37, 24, 3, 0.95f);  /* most of every row dropped, whole rows too */
}

/* ds_km_attn_elem's element of ds_dropout_forward's mask over the [B,NH,T,T] tensor is
 * what ds_km_drop_at, a walk along a row (ds_km_drop_next) and a row at once
 * (ds_km_drop_row, in runs of DS_KM_DROP_RUN: T spans three) give, at p small and large */
static void test_mask_mapping(void **state) {
    (void)state;
    enum { B = 2, NH = 3, T = 2 * DS_KM_DROP_RUN + 7 };
    float row[T];
    size_t n = (size_t)B * NH * T * T;
    float *ones = malloc(n * sizeof *ones), *mask = malloc(n * sizeof *mask);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    const float ps[] = {0.1f, 0.5f, 0.97f};
    for (int pi = 0; pi < 3; pi++) {
        float p = ps[pi];
        ds_dropout_forward(mask, ones, n, p, KEY);
        ds_km_drop d = ds_km_drop_of(p, KEY.seed, KEY.step, KEY.layer, KEY.micro, KEY.offset);
        size_t kept = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++) {
                    ds_km_drop_walk w = {UINT64_MAX, {0, 0, 0, 0}};
                    ds_km_drop_row(row, d, ds_km_attn_elem(b, h, i, 0, NH, T), T);
                    for (int j = 0; j < T; j++) {
                        uint64_t e = ds_km_attn_elem(b, h, i, j, NH, T);
                        float want = mask[((size_t)(b * NH + h) * T + i) * T + j];
                        assert_true(ds_km_drop_at(d, e) == want);
                        assert_true(ds_km_drop_next(d, &w, e) == want);
                        assert_true(row[j] == want);
                        kept += want != 0.0f;
                    }
                }
        /* neither all kept nor all dropped: the comparison saw both kinds */
        assert_true(kept > 0 && kept < n);
    }
    free(ones), free(mask);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_small),
        cmocka_unit_test(test_fused_chunks),
        cmocka_unit_test(test_fused_dropout),
        cmocka_unit_test(test_mask_mapping),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
