/* The CPU's embedding16, posemb16 and layernorm16 pairs (kernel_table.h) against plain
 * references: the fp32 kernels on fp32 copies of the 16-bit parameters (LayerNorm's
 * 16-bit output: the fp32 output rounded with ds_half_from_f32), their
 * gradients in a zeroed fp32 buffer added into the 16-bit ones with ds_half_acc_f32 (the
 * engine's fp32 images before these entries): the same bits, in bf16 and fp16. Also: an
 * embedding's repeated ids summed in order, rows of ids not in the batch untouched to
 * the bit (a -0 included), gradients left out, workspaces full of NaNs, and one
 * rounding per call. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernel_math.h"
#include "kernel_table.h"
#include "kernels.h"
#include "kernels_testutil.h"

static float widen(ds_half h, uint16_t x) {
    return h == DS_HALF_BF16 ? ds_km_bf16_to_f32(x) : ds_km_f16_to_f32(x);
}
static uint16_t narrow(ds_half h, float x) {
    return h == DS_HALF_BF16 ? ds_km_f32_to_bf16(x) : ds_km_f32_to_f16(x);
}

static uint16_t *rand16(ds_half h, size_t n) {
    uint16_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = narrow(h, (float)(2 * tu_uniform() - 1));
    return y;
}
static uint16_t *copy16(const uint16_t *x, size_t n) {
    uint16_t *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}
static float *widened(ds_half h, const uint16_t *x, size_t n) {
    float *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = widen(h, x[i]);
    return y;
}
static void *nan_ws(size_t bytes) {
    float *ws = malloc(bytes);
    for (size_t i = 0; i < bytes / sizeof *ws; i++) ws[i] = NAN;
    return ws;
}

/* ---- embedding ------------------------------------------------------------------------ */

enum { V = 50, C = 37, N = 40 };

static void check_embedding(ds_half h) {
    int32_t ids[N];
    for (int n = 0; n < N; n++) ids[n] = (int32_t)(tu_uniform() * 12) * 3; /* repeats, gaps */
    ids[N - 1] = V - 1;
    uint16_t *table = rand16(h, (size_t)V * C), *dtable = rand16(h, (size_t)V * C);
    dtable[1 * C] = 0x8000; /* -0 in both formats, in a row no id touches */
    float *out = tu_randf((size_t)N * C, -1, 1), *want = malloc((size_t)N * C * sizeof *want);
    float *timg = widened(h, table, (size_t)V * C);
    ds_embedding_forward(want, ids, timg, N, C);
    ds_embedding16_forward(h, out, ids, table, N, C);
    assert_memory_equal(out, want, (size_t)N * C * sizeof *out);

    float *dout = tu_randf((size_t)N * C, -1, 1), *gimg = calloc((size_t)V * C, sizeof *gimg);
    uint16_t *wantg = copy16(dtable, (size_t)V * C);
    ds_embedding_backward(gimg, dout, ids, N, C);
    int touched[V] = {0};
    for (int n = 0; n < N; n++) touched[ids[n]] = 1;
    for (int v = 0; v < V; v++) /* the image's fold, except that untouched rows stay as they are */
        if (touched[v]) ds_half_acc_f32(h, wantg + (size_t)v * C, gimg + (size_t)v * C, C);
    void *ws = nan_ws(ds_embedding16_workspace(N, C));
    ds_embedding16_backward(h, dtable, dout, ids, N, C, ws);
    assert_memory_equal(dtable, wantg, (size_t)V * C * sizeof *dtable);
    assert_int_equal(dtable[1 * C], 0x8000);
    free(table), free(dtable), free(out), free(want), free(timg), free(dout), free(gimg),
        free(wantg), free(ws);
}

/* ---- position embedding ---------------------------------------------------------------- */

enum { B = 3, T = 11 };

static void check_posemb(ds_half h) {
    size_t tc = (size_t)T * C, n = B * tc;
    uint16_t *table = rand16(h, tc), *dtable = rand16(h, tc);
    float *inp = tu_randf(n, -1, 1), *out = tu_randf(n, -1, 1), *want = malloc(n * sizeof *want);
    float *timg = widened(h, table, tc);
    for (int b = 0; b < B; b++) ds_add_forward(want + b * tc, inp + b * tc, timg, tc);
    ds_posemb16_forward(h, out, inp, table, B, T, C);
    assert_memory_equal(out, want, n * sizeof *out);

    float *dout = tu_randf(n, -1, 1), *gimg = calloc(tc, sizeof *gimg);
    uint16_t *wantg = copy16(dtable, tc);
    for (int b = 0; b < B; b++) ds_accumulate(gimg, dout + b * tc, tc);
    ds_half_acc_f32(h, wantg, gimg, tc);
    ds_posemb16_backward(h, dtable, dout, B, T, C);
    assert_memory_equal(dtable, wantg, tc * sizeof *dtable);
    free(table), free(dtable), free(inp), free(out), free(want), free(timg), free(dout),
        free(gimg), free(wantg);
}

/* ---- LayerNorm ------------------------------------------------------------------------ */

static void check_layernorm(ds_half h, int wanted) {
    size_t n = (size_t)N * C;
    uint16_t *w = rand16(h, C), *b = rand16(h, C), *dw = rand16(h, C), *db = rand16(h, C);
    float *inp = tu_randf(n, -2, 2), *out = malloc(n * 4), *want = malloc(n * 4);
    float mean[N], rstd[N], wmean[N], wrstd[N];
    float *wimg = widened(h, w, C), *bimg = widened(h, b, C);
    ds_layernorm_forward(want, wmean, wrstd, inp, wimg, bimg, N, C, 1e-5f);
    void *ws = nan_ws(ds_layernorm16_workspace(0, C));
    ds_layernorm16_forward(h, out, mean, rstd, inp, w, b, N, C, 1e-5f, 0, ws);
    assert_memory_equal(out, want, n * 4);
    assert_memory_equal(mean, wmean, sizeof mean);
    assert_memory_equal(rstd, wrstd, sizeof rstd);
    free(ws);
    /* a 16-bit output: the fp32 one rounded, element for element */
    uint16_t *out16 = malloc(n * 2), *want16 = malloc(n * 2);
    ds_half_from_f32(h, want16, want, n);
    ws = nan_ws(ds_layernorm16_workspace(0, C));
    ds_layernorm16_forward(h, out16, NULL, NULL, inp, w, b, N, C, 1e-5f, 1, ws);
    assert_memory_equal(out16, want16, n * 2);
    free(ws), free(out16), free(want16);

    int want_dinp = wanted & 1, want_dw = wanted & 2, want_db = wanted & 4;
    float *dout = tu_randf(n, -1, 1), *dinp = tu_randf(n, -1, 1), *wdinp = tu_copyf(dinp, n);
    float *gw = calloc(C, 4), *gb = calloc(C, 4);
    uint16_t *wdw = copy16(dw, C), *wdb = copy16(db, C);
    ds_layernorm_backward(want_dinp ? wdinp : NULL, 1, want_dw ? gw : NULL, want_db ? gb : NULL,
                          dout, inp, wimg, mean, rstd, N, C);
    if (want_dw) ds_half_acc_f32(h, wdw, gw, C);
    if (want_db) ds_half_acc_f32(h, wdb, gb, C);
    ws = nan_ws(ds_layernorm16_workspace(1, C));
    ds_layernorm16_backward(h, want_dinp ? dinp : NULL, 1, want_dw ? dw : NULL, want_db ? db : NULL,
                            dout, inp, w, mean, rstd, N, C, ws);
    assert_memory_equal(dinp, wdinp, n * 4);
    assert_memory_equal(dw, wdw, C * 2);
    assert_memory_equal(db, wdb, C * 2);
    free(w), free(b), free(dw), free(db), free(inp), free(out), free(want), free(wimg),
        free(bimg), free(ws), free(dout), free(dinp), free(wdinp), free(gw), free(gb), free(wdw),
        free(wdb);
}

static void each_case(ds_half h) {
    tu_seed(h == DS_HALF_BF16 ? 26 : 27);
    check_embedding(h);
    check_posemb(h);
    for (int wanted = 0; wanted < 8; wanted++) check_layernorm(h, wanted);
}

static void test_bf16(void **state) {
    (void)state;
    each_case(DS_HALF_BF16);
}

static void test_fp16(void **state) {
    (void)state;
    each_case(DS_HALF_F16);
}

/* One rounding per call: 4 gradients of 1/512 on a bf16 1.0 (half an ulp is 1/256) land
 * as their fp32 sum, 1/128; added one by one in 16 bits each would be lost. */
static void test_one_rounding_per_call(void **state) {
    (void)state;
    const ds_half h = DS_HALF_BF16;
    const uint16_t one = narrow(h, 1.0f);
    float dout[4], ones[4], zeros[4] = {0}, rstd[4] = {1, 1, 1, 1};
    for (int i = 0; i < 4; i++) dout[i] = 1.0f / 512, ones[i] = 1.0f;
    int32_t ids[4] = {2, 2, 2, 2};
    uint16_t table[3] = {one, one, one};
    void *ws = malloc(ds_embedding16_workspace(4, 1) + ds_layernorm16_workspace(1, 1));
    ds_embedding16_backward(h, table, dout, ids, 4, 1, ws);
    assert_int_equal(table[0], one); /* untouched */
    assert_true(widen(h, table[2]) == 1.0f + 1.0f / 128);

    uint16_t pos = one;
    ds_posemb16_backward(h, &pos, dout, 4, 1, 1);
    assert_true(widen(h, pos) == 1.0f + 1.0f / 128);

    uint16_t w = one, dw = one, db = one;
    ds_layernorm16_backward(h, NULL, 1, &dw, &db, dout, ones, &w, zeros, rstd, 4, 1, ws);
    assert_true(widen(h, db) == 1.0f + 1.0f / 128);
    assert_true(widen(h, dw) == 1.0f + 1.0f / 128); /* (x - 0) * 1 * dout */
    free(ws);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_one_rounding_per_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
