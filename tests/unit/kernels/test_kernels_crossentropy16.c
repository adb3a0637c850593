/* The CPU's cross-entropy over 16-bit logits (kernel_table.h's crossentropy16) against the
 * fp32 kernels on the widened logits: the losses and their sum bit for bit, d(logits)
 * the fp32 gradient rounded once per element, bit for bit, in place or not, forward or
 * backward alone as in both; rows with a negative target give 0 and a zero row; a row
 * longer than the kernel's blocks and not a multiple of its lanes. And with fp16's loss
 * scale, d(logits) stays finite. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel_math.h"
#include "kernels.h"
#include "kernels_testutil.h"

enum { N = 37, V = 5003 };

typedef struct fixture {
    uint16_t *x16;     /* the logits */
    float *x;          /* widened */
    int32_t t[N];
} fixture;

static void make(fixture *f, ds_half h, float spread) {
    size_t n = (size_t)N * V;
    float *r = tu_randf(n, -spread, spread);
    f->x16 = malloc(n * 2);
    f->x = malloc(n * 4);
    ds_half_from_f32(h, f->x16, r, n);
    ds_half_to_f32(h, f->x, f->x16, n);
    for (int i = 0; i < N; i++) f->t[i] = i % 9 == 4 ? -1 : (int32_t)(tu_uniform() * V);
    f->t[1] = V - 1; /* in the row's tail (past the last whole lane group) */
    f->t[2] = 0;
    free(r);
}

static void drop(fixture *f) { free(f->x16), free(f->x); }

static void each_format(ds_half h) {
    fixture f;
    make(&f, h, 8.0f);
    size_t n = (size_t)N * V;
    float dloss = 1.0f / 33, loss32[N], loss16[N], loss_f[N];
    /* the fp32 kernels on the widened logits */
    float *g32 = malloc(n * 4);
    double sum32 = ds_crossentropy_forward_backward(loss32, g32, f.x, f.t, dloss, N, V);
    uint16_t *want = malloc(n * 2);
    ds_half_from_f32(h, want, g32, n);
    /* fused, out of place */
    uint16_t *g16 = malloc(n * 2);
    double sum16 = ds_crossentropy16(h, loss16, g16, f.x16, f.t, dloss, N, V);
    assert_memory_equal(loss16, loss32, sizeof loss32);
    assert_true(sum16 == sum32);
    assert_memory_equal(g16, want, n * 2);
    for (int i = 0; i < N; i++)
        if (f.t[i] < 0) {
            assert_true(loss16[i] == 0.0f);
            for (int v = 0; v < V; v++) assert_int_equal(g16[(size_t)i * V + v], 0);
        }
    /* forward alone: the same losses, the logits untouched */
    uint16_t *copy = malloc(n * 2);
    memcpy(copy, f.x16, n * 2);
    assert_true(ds_crossentropy16(h, loss_f, NULL, f.x16, f.t, 0.0f, N, V) == sum32);
    assert_memory_equal(loss_f, loss32, sizeof loss32);
    assert_memory_equal(f.x16, copy, n * 2);
    /* backward alone, in place (the criterion's call): no losses, the same gradient */
    assert_true(ds_crossentropy16(h, NULL, copy, copy, f.t, dloss, N, V) == 0.0);
    assert_memory_equal(copy, want, n * 2);
    /* fused in place */
    memcpy(copy, f.x16, n * 2);
    ds_crossentropy16(h, loss_f, copy, copy, f.t, dloss, N, V);
    assert_memory_equal(copy, want, n * 2);
    assert_memory_equal(loss_f, loss32, sizeof loss32);
    free(g32), free(want), free(g16), free(copy);
    drop(&f);
}

static void test_bf16(void **state) {
    (void)state;
    tu_seed(41);
    each_format(DS_HALF_BF16);
}

static void test_fp16(void **state) {
    (void)state;
    tu_seed(42);
    each_format(DS_HALF_F16);
}

/* fp16 with the loss scaler's largest default scale (2^16) over as few counted rows as a
 * step has (N here): d(logits) = scale * (softmax - onehot) / count, at most scale/count
 * in magnitude (far below fp16's 65504), the small probabilities rounding towards zero
 * as they did when matmul16 rounded the fp32 d(logits) to fp16. */
static void test_fp16_scaled_finite(void **state) {
    (void)state;
    tu_seed(43);
    fixture f;
    make(&f, DS_HALF_F16, 30.0f);
    size_t n = (size_t)N * V;
    uint16_t *g = malloc(n * 2);
    float losses[N];
    ds_crossentropy16(DS_HALF_F16, losses, g, f.x16, f.t, 65536.0f / N, N, V);
    for (size_t i = 0; i < n; i++) assert_true(isfinite(ds_km_f16_to_f32(g[i])));
    free(g);
    drop(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_fp16_scaled_finite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
