/* The fused attention pair (attention_fused.c) against the reference kernels
 * (attention.c): forward's out with the reference's bits and lse against a
 * double-precision log-sum-exp; backward's dqkv added onto a non-zero buffer, within
 * rounding of the reference's. Shapes cover T below, at and past a multiple of the
 * backward's chunk of rows and of the register tiles, and head sizes that are not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"
#include "kernels_testutil.h"

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

static void check_fused(int B, int T, int C, int NH) {
    tu_seed((uint64_t)(B * 1000003 + T * 1009 + C * 31 + NH));
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    float *qkv = tu_randf(nx, -2.0f, 2.0f), *dout = tu_randf(ny, -1.0f, 1.0f);
    float *base = tu_randf(nx, -0.5f, 0.5f);
    float *out_ref = tu_randf(ny, 0, 1), *att = tu_randf(na, 0, 1), *scratch = tu_randf(na, 0, 1);
    float *out = tu_randf(ny, 0, 1), *lse = tu_randf(nl, 0, 1);
    float *g_ref = tu_copyf(base, nx), *g = tu_copyf(base, nx);

    ds_attention_forward(out_ref, att, qkv, B, T, C, NH);
    ds_attention_forward_fused(out, lse, qkv, B, T, C, NH);
    assert_memory_equal(out, out_ref, ny * sizeof(float));
    double *want_lse = ref_lse(qkv, B, T, C, NH);
    assert_int_equal(tu_mismatch("lse", lse, want_lse, nl, LSE_TOL, LSE_TOL), 0);

    ds_attention_backward(g_ref, 1, scratch, dout, qkv, att, B, T, C, NH);
    ds_attention_backward_fused(g, 1, dout, qkv, lse, B, T, C, NH);
    double *want = tu_to_double(g_ref, nx);
    assert_int_equal(tu_mismatch("fused dqkv", g, want, nx, BWD_ATOL, BWD_RTOL), 0);
    /* the same call gives the same bits */
    float *g2 = tu_copyf(base, nx);
    ds_attention_backward_fused(g2, 1, dout, qkv, lse, B, T, C, NH);
    assert_memory_equal(g, g2, nx * sizeof(float));

    free(qkv), free(dout), free(base), free(out_ref), free(att), free(scratch), free(out);
    free(lse), free(g_ref), free(g), free(g2), free(want_lse), free(want);
}

static void test_fused_small(void **state) {
    (void)state;
    check_fused(1, 1, 4, 1);
    check_fused(2, 5, 8, 2);
    check_fused(1, 7, 12, 3);
    check_fused(3, 19, 48, 4); /* head size 12: not a multiple of the tile width */
}

static void test_fused_chunks(void **state) {
    (void)state;
    check_fused(1, 64, 64, 1);   /* exactly one chunk of rows */
    check_fused(2, 67, 96, 3);   /* one chunk and 3 rows: not a multiple of the tiles */
    check_fused(1, 130, 128, 2); /* three chunks, the last of 2 rows; head size 64 */
    check_fused(2, 200, 80, 2);  /* head size 40 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fused_small),
        cmocka_unit_test(test_fused_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
