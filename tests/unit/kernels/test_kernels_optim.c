/* Optimizer steps against double-precision references of PyTorch's formulas, and the
 * sum of squares against a double sum. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"
#include "kernels_testutil.h"

static void test_adamw_matches_reference(void **state) {
    (void)state;
    tu_seed(31);
    size_t n = 100003;
    float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float wds[2] = {0.1f, 0.0f};
    for (int w = 0; w < 2; w++) {
        float *p = tu_randf(n, -1, 1), *m = calloc(n, 4), *v = calloc(n, 4);
        double *pd = tu_to_double(p, n), *md = calloc(n, 8), *vd = calloc(n, 8);
        for (int t = 1; t <= 3; t++) {
            float *g = tu_randf(n, -0.01f, 0.01f);
            g[0] = 0.0f;
            ds_adamw_update(p, g, m, v, n, lr, b1, b2, eps, wds[w], t);
            for (size_t i = 0; i < n; i++) { /* torch.optim.AdamW */
                pd[i] -= (double)lr * wds[w] * pd[i];
                md[i] = b1 * md[i] + (1.0 - b1) * g[i];
                vd[i] = b2 * vd[i] + (1.0 - b2) * (double)g[i] * g[i];
                double mh = md[i] / (1.0 - pow(b1, t)), vh = vd[i] / (1.0 - pow(b2, t));
                pd[i] -= lr * mh / (sqrt(vh) + eps);
            }
            free(g);
        }
        assert_int_equal(tu_mismatch("adamw param", p, pd, n, 1e-6, 1e-5), 0);
        assert_int_equal(tu_mismatch("adamw m", m, md, n, 1e-9, 1e-5), 0);
        assert_int_equal(tu_mismatch("adamw v", v, vd, n, 1e-12, 1e-5), 0);
        free(p), free(m), free(v), free(pd), free(md), free(vd);
    }
}

/* The scaled step is the plain step on the scaled gradient (power-of-two scale: exact). */
static void test_adamw_scaled(void **state) {
    (void)state;
    tu_seed(35);
    size_t n = 50001;
    float *p1 = tu_randf(n, -1, 1), *g = tu_randf(n, -1, 1), *gs = malloc(n * 4);
    float *p2 = tu_copyf(p1, n), *m1 = calloc(n, 4), *v1 = calloc(n, 4), *m2 = calloc(n, 4),
          *v2 = calloc(n, 4);
    for (size_t i = 0; i < n; i++) gs[i] = g[i] * 0.25f;
    float *g_before = tu_copyf(g, n);
    for (int t = 1; t <= 2; t++) {
        ds_adamw_update_scaled(p1, g, 0.25f, m1, v1, n, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, t);
        ds_adamw_update(p2, gs, m2, v2, n, 1e-3f, 0.9f, 0.99f, 1e-8f, 0.1f, t);
    }
    assert_memory_equal(p1, p2, n * 4);
    assert_memory_equal(m1, m2, n * 4);
    assert_memory_equal(v1, v2, n * 4);
    assert_memory_equal(g, g_before, n * 4);
    free(p1), free(g), free(gs), free(p2), free(m1), free(v1), free(m2), free(v2), free(g_before);
}

/* Spans step each run with its own decay, as one call per run would, and leave the
 * elements between and around them alone: fp32 and a 16-bit working copy. */
static void test_adamw_spans(void **state) {
    (void)state;
    tu_seed(37);
    size_t n = 40009;
    const ds_decay_span spans[] = {{5, 20000, 0.1f}, {20005, 0, 0.1f}, {20011, 19990, 0.0f}};
    float *p1 = tu_randf(n, -1, 1), *g = tu_randf(n, -1, 1), *p2 = tu_copyf(p1, n);
    float *m1 = tu_randf(n, -0.1f, 0.1f), *v1 = tu_randf(n, 0, 0.01f);
    float *m2 = tu_copyf(m1, n), *v2 = tu_copyf(v1, n), *p0 = tu_copyf(p1, n);
    uint16_t *w1 = malloc(n * 2), *w2 = malloc(n * 2), *g16 = malloc(n * 2);
    ds_half_from_f32(DS_HALF_BF16, w1, p1, n);
    ds_half_from_f32(DS_HALF_BF16, w2, p1, n);
    ds_half_from_f32(DS_HALF_BF16, g16, g, n);
    for (int t = 1; t <= 2; t++) {
        ds_adamw_spans(p1, g, 0.5f, m1, v1, spans, 3, 1e-3f, 0.9f, 0.99f, 1e-8f, t);
        for (int k = 0; k < 3; k++) {
            size_t o = spans[k].off;
            ds_adamw_update_scaled(p2 + o, g + o, 0.5f, m2 + o, v2 + o, spans[k].n, 1e-3f, 0.9f,
                                   0.99f, 1e-8f, spans[k].weight_decay, t);
        }
    }
    assert_memory_equal(p1, p2, n * 4);
    assert_memory_equal(m1, m2, n * 4);
    assert_memory_equal(v1, v2, n * 4);
    assert_memory_equal(p1, p0, 5 * 4);                      /* before the first span */
    assert_memory_equal(p1 + 20005, p0 + 20005, 6 * 4);      /* between */
    assert_memory_equal(p1 + 40001, p0 + 40001, 8 * 4);      /* after the last */
    assert_memory_not_equal(p1 + 5, p0 + 5, 20000 * 4);
    /* the 16-bit path: masters p1/p2 again from here, the working copies rounded */
    ds_adamw_half_spans(DS_HALF_BF16, w1, g16, 0.25f, p1, m1, v1, spans, 3, 1e-3f, 0.9f, 0.99f,
                        1e-8f, 3);
    for (int k = 0; k < 3; k++) {
        size_t o = spans[k].off;
        ds_adamw_update_half(DS_HALF_BF16, w2 + o, g16 + o, 0.25f, p2 + o, m2 + o, v2 + o,
                             spans[k].n, 1e-3f, 0.9f, 0.99f, 1e-8f, spans[k].weight_decay, 3);
    }
    assert_memory_equal(w1, w2, n * 2);
    assert_memory_equal(p1, p2, n * 4);
    free(p1), free(g), free(p2), free(m1), free(v1), free(m2), free(v2), free(p0);
    free(w1), free(w2), free(g16);
}

static void test_adamw_deterministic(void **state) {
    (void)state;
    tu_seed(32);
    size_t n = 300001;
    float *p = tu_randf(n, -1, 1), *g = tu_randf(n, -1, 1);
    float *p2 = tu_copyf(p, n), *m = calloc(n, 4), *v = calloc(n, 4), *m2 = calloc(n, 4),
          *v2 = calloc(n, 4);
    ds_adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    ds_kernels_set_threads(1);
    ds_adamw_update(p2, g, m2, v2, n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1);
    ds_kernels_set_threads(0);
    assert_memory_equal(p, p2, n * 4);
    assert_memory_equal(m, m2, n * 4);
    assert_memory_equal(v, v2, n * 4);
    free(p), free(g), free(p2), free(m), free(v), free(m2), free(v2);
}

static void test_sgd_matches_reference(void **state) {
    (void)state;
    tu_seed(33);
    size_t n = 1001;
    float *p = tu_randf(n, -1, 1), *buf = calloc(n, 4);
    double *pd = tu_to_double(p, n), *bd = calloc(n, 8);
    for (int t = 0; t < 3; t++) { /* torch.optim.SGD, dampening 0 */
        float *g = tu_randf(n, -1, 1);
        ds_sgd_update(p, g, buf, n, 0.1f, 0.9f, 0.01f);
        for (size_t i = 0; i < n; i++) {
            double gi = g[i] + 0.01 * pd[i];
            bd[i] = t == 0 ? gi : 0.9 * bd[i] + gi;
            pd[i] -= 0.1 * bd[i];
        }
        free(g);
    }
    assert_int_equal(tu_mismatch("sgd param", p, pd, n, 1e-6, 1e-5), 0);
    /* no momentum: buf may be NULL */
    float *q = tu_randf(n, -1, 1), *g = tu_randf(n, -1, 1);
    double *qd = tu_to_double(q, n);
    ds_sgd_update(q, g, NULL, n, 0.5f, 0.0f, 0.0f);
    for (size_t i = 0; i < n; i++) qd[i] -= 0.5 * g[i];
    assert_int_equal(tu_mismatch("sgd plain", q, qd, n, 1e-6, 1e-6), 0);
    free(p), free(buf), free(pd), free(bd), free(q), free(g), free(qd);
}

static void test_sumsq(void **state) {
    (void)state;
    tu_seed(34);
    size_t sizes[4] = {0, 1, 16385, 1234567};
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        float *x = tu_randf(n, -2, 2);
        double want = 0;
        for (size_t i = 0; i < n; i++) want += (double)x[i] * x[i];
        double got = ds_sumsq(x, n);
        assert_true(fabs(got - want) <= 1e-12 * (want + 1));
        ds_kernels_set_threads(1);
        double got1 = ds_sumsq(x, n);
        ds_kernels_set_threads(0);
        assert_memory_equal(&got, &got1, sizeof got);
        free(x);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_matches_reference),
        cmocka_unit_test(test_adamw_scaled),
        cmocka_unit_test(test_adamw_spans),
        cmocka_unit_test(test_adamw_deterministic),
        cmocka_unit_test(test_sgd_matches_reference),
        cmocka_unit_test(test_sumsq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
