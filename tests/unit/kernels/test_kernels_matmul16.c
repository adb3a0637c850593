/* The CPU's matmul16 pair (kernel_table.h) against a triple loop in double on the same
 * operands rounded to 16 bits: bf16 and fp16, with and without bias, the gradients
 * accumulated (+= on fp32 dinp, one rounding on the 16-bit dweight and dbias), any
 * gradient left out, and a workspace of exactly ds_matmul16_workspace's bytes full of
 * NaNs (it is written before it is read); OC past DS_MATMUL16_COLS, not a multiple of
 * it, goes through the output columns in chunks, dinp summed chunk after chunk. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel_math.h"
#include "kernel_table.h"
#include "kernels.h"
#include "kernels_testutil.h"

typedef struct shape {
    int N, C, OC;
} shape;

/* small and odd; past the GEMM's threshold for splitting over threads; three chunks of
 * output columns, the last one short */
static const shape SHAPES[] = {
    {7, 13, 5}, {64, 256, 128}, {5, 24, 2 * DS_MATMUL16_COLS + 37}};

static double widen(ds_half h, uint16_t x) {
    return h == DS_HALF_BF16 ? ds_km_bf16_to_f32(x) : ds_km_f16_to_f32(x);
}
static uint16_t narrow(ds_half h, float x) {
    return h == DS_HALF_BF16 ? ds_km_f32_to_bf16(x) : ds_km_f32_to_f16(x);
}
static double round16(ds_half h, float x) { return widen(h, narrow(h, x)); }

static uint16_t *rand16(ds_half h, size_t n) {
    uint16_t *y = malloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = narrow(h, (float)(2 * tu_uniform() - 1));
    return y;
}

static void *nan_workspace(ds_half h, int backward, const shape *s, int io16) {
    (void)h;
    size_t bytes = ds_matmul16_workspace(DS_GEMM16_F32, backward, (size_t)s->N, (size_t)s->C,
                                         (size_t)s->OC, io16);
    float *ws = malloc(bytes);
    for (size_t i = 0; i < bytes / sizeof *ws; i++) ws[i] = NAN;
    return ws;
}

/* fp32 sums of up to 256 products of values below 1: well inside 1e-4 */
#define ATOL 1e-4
#define RTOL 1e-5

static void check_forward(ds_half h, const shape *s, int with_bias) {
    int N = s->N, C = s->C, OC = s->OC;
    float *inp = tu_randf((size_t)N * C, -1, 1), *out = tu_randf((size_t)N * OC, -1, 1);
    uint16_t *w = rand16(h, (size_t)OC * C), *b = with_bias ? rand16(h, (size_t)OC) : NULL;
    double *want = malloc((size_t)N * OC * sizeof *want);
    double *unrounded = malloc((size_t)N * OC * sizeof *unrounded);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = b ? widen(h, b[o]) : 0, raw = acc;
            for (int c = 0; c < C; c++) {
                acc += round16(h, inp[n * C + c]) * widen(h, w[o * C + c]);
                raw += inp[n * C + c] * widen(h, w[o * C + c]);
            }
            want[n * OC + o] = acc;
            unrounded[n * OC + o] = raw;
        }
    void *ws = nan_workspace(h, 0, s, 0);
    ds_matmul16_forward(h, out, inp, 0, w, b, N, C, OC, ws);
    assert_int_equal(tu_mismatch("out", out, want, (size_t)N * OC, ATOL, RTOL), 0);
    /* the input really is rounded: the fp32 input's product is further away than that */
    size_t far = 0;
    for (size_t i = 0; i < (size_t)N * OC; i++)
        far += fabs(out[i] - unrounded[i]) > ATOL + RTOL * fabs(unrounded[i]);
    assert_true(far > 0);
    free(inp), free(out), free(w), free(b), free(want), free(unrounded), free(ws);
}

/* |got - want| within one 16-bit rounding of want (and the fp32 sum's error) */
static void check_half(const char *what, ds_half h, const uint16_t *got, const double *want,
                       size_t n) {
    double ulp = h == DS_HALF_BF16 ? 0x1p-8 : 0x1p-11;
    for (size_t i = 0; i < n; i++) {
        double g = widen(h, got[i]), err = fabs(g - want[i]);
        if (!(err <= ATOL + ulp * fabs(want[i]))) {
            fprintf(stderr, "%s[%zu]: got %.9g want %.9g\n", what, i, g, want[i]);
            fail();
        }
    }
}

/* wanted: bit 0 dinp, bit 1 dweight, bit 2 dbias */
static void check_backward(ds_half h, const shape *s, int wanted) {
    int N = s->N, C = s->C, OC = s->OC;
    int want_dinp = wanted & 1, want_dw = wanted & 2, want_db = wanted & 4;
    float *inp = tu_randf((size_t)N * C, -1, 1), *dout = tu_randf((size_t)N * OC, -1, 1);
    float *dinp = tu_randf((size_t)N * C, -1, 1);
    uint16_t *w = rand16(h, (size_t)OC * C), *dw = rand16(h, (size_t)OC * C);
    uint16_t *db = rand16(h, (size_t)OC);
    uint16_t *dw0 = malloc((size_t)OC * C * 2), *db0 = malloc((size_t)OC * 2);
    memcpy(dw0, dw, (size_t)OC * C * 2);
    memcpy(db0, db, (size_t)OC * 2);
    double *wdinp = tu_to_double(dinp, (size_t)N * C);
    double *wdw = calloc((size_t)OC * C, sizeof *wdw), *wdb = calloc((size_t)OC, sizeof *wdb);
    /* dinp gets each chunk's sum in turn, in fp32 as the kernels add it */
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            float acc = dinp[n * C + c];
            for (int o0 = 0; o0 < OC; o0 += DS_MATMUL16_COLS) {
                double part = 0;
                for (int o = o0; o < OC && o < o0 + DS_MATMUL16_COLS; o++)
                    part += round16(h, dout[n * OC + o]) * widen(h, w[o * C + c]);
                acc += (float)part;
            }
            wdinp[n * C + c] = acc;
        }
    for (int o = 0; o < OC; o++) {
        wdb[o] = widen(h, db0[o]);
        for (int n = 0; n < N; n++) wdb[o] += round16(h, dout[n * OC + o]);
        for (int c = 0; c < C; c++) {
            double acc = widen(h, dw0[o * C + c]);
            for (int n = 0; n < N; n++)
                acc += round16(h, dout[n * OC + o]) * round16(h, inp[n * C + c]);
            wdw[o * C + c] = acc;
        }
    }
    float *dinp0 = tu_copyf(dinp, (size_t)N * C);
    void *ws = nan_workspace(h, 1, s, 0);
    ds_matmul16_backward(h, want_dinp ? dinp : NULL, 1, want_dw ? dw : NULL, want_db ? db : NULL,
                         dout, want_dw ? inp : NULL, 0, want_dinp ? w : NULL, N, C, OC, ws);
    if (want_dinp) assert_int_equal(tu_mismatch("dinp", dinp, wdinp, (size_t)N * C, ATOL, RTOL), 0);
    else assert_memory_equal(dinp, dinp0, (size_t)N * C * sizeof *dinp);
    if (want_dw) check_half("dweight", h, dw, wdw, (size_t)OC * C);
    else assert_memory_equal(dw, dw0, (size_t)OC * C * 2);
    if (want_db) check_half("dbias", h, db, wdb, (size_t)OC);
    else assert_memory_equal(db, db0, (size_t)OC * 2);
    free(inp), free(dout), free(dinp), free(dinp0), free(w), free(dw), free(db), free(dw0),
        free(db0), free(wdinp), free(wdw), free(wdb), free(ws);
}

static void each_case(ds_half h) {
    tu_seed(h == DS_HALF_BF16 ? 16 : 17);
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++) {
        check_forward(h, &SHAPES[k], 1);
        check_forward(h, &SHAPES[k], 0);
        for (int wanted = 1; wanted < 8; wanted++) check_backward(h, &SHAPES[k], wanted);
    }
}

static void test_bf16(void **state) {
    (void)state;
    each_case(DS_HALF_BF16);
}

static void test_fp16(void **state) {
    (void)state;
    each_case(DS_HALF_F16);
}

/* One rounding per call: a gradient smaller than half a bf16 ulp of the accumulated
 * value, summed over rows in fp32, lands once; added row by row in 16 bits it would be
 * lost every time. */
static void test_one_rounding_per_call(void **state) {
    (void)state;
    enum { N = 64, C = 1, OC = 1 };
    float inp[N], dout[N];
    for (int n = 0; n < N; n++) inp[n] = 1.0f, dout[n] = 1.0f / 512; /* bf16 exact */
    uint16_t dw = narrow(DS_HALF_BF16, 1.0f), db = dw;
    void *ws = malloc(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, OC, 0));
    ds_matmul16_backward(DS_HALF_BF16, NULL, 1, &dw, &db, dout, inp, 0, NULL, N, C, OC, ws);
    assert_true(widen(DS_HALF_BF16, dw) == 1.125); /* 1 + 64/512 */
    assert_true(widen(DS_HALF_BF16, db) == 1.125);
    free(ws);
}

/* dinp gets each chunk's sum in turn: from 2^24, the first chunk's last column adds 1
 * and the second chunk's first column adds 1, each sum exact, each addition to 2^24 a tie
 * that rounds to even, back to 2^24. One GEMM over both columns (OpenBLAS's, main before
 * chunking) sums them first: 2^24 + 2. */
static void test_dinp_by_chunks(void **state) {
    (void)state;
    enum { N = 1, C = 1, OC = DS_MATMUL16_COLS + 2, LAST = DS_MATMUL16_COLS - 1 };
    float dout[OC] = {0}, dinp = 0x1p24f;
    uint16_t w[OC];
    for (int o = 0; o < OC; o++) w[o] = narrow(DS_HALF_BF16, 0.0f);
    dout[LAST] = dout[LAST + 1] = 1.0f;
    w[LAST] = w[LAST + 1] = narrow(DS_HALF_BF16, 1.0f);
    void *ws = malloc(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, OC, 0));
    ds_matmul16_backward(DS_HALF_BF16, &dinp, 1, NULL, NULL, dout, NULL, 0, w, N, C, OC, ws);
    assert_true(dinp == 0x1p24f);
    free(ws);
}

/* The workspace grows with the chunk, not with OC: GPT's head at N = 8,192 rows */
static void test_workspace_bounded(void **state) {
    (void)state;
    size_t N = 8192, C = 768, V = 50257, K = DS_MATMUL16_COLS;
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, V, 0), 2 * N * K + 2 * N * C);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, V, 0),
                     4 * K * C + 4 * N * C + 4 * K + 4 * N * K);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 0, N, C, V, 0), 4 * K * C + 4 * N * C + 4 * K);
    /* OC within one chunk: the unchunked sizes */
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, 3072, 0), 2 * N * 3072 + 2 * N * C);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, 3072, 0),
                     4 * 3072 * C + 4 * N * C + 4 * 3072 + 4 * N * 3072);
    /* 16-bit logits: the head's 16-bit output is one chunk's fp32 part on cpu and sim,
     * nothing on cuda, which reads a 16-bit input as it is; its 16-bit output gradient,
     * rows V = 50,257 elements (2 bytes aligned) apart, goes through the chunk's part on
     * cuda as an fp32 one does */
    int io = DS_MM16_IN | DS_MM16_OUT;
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 0, N, C, V, io),
                     4 * K * C + 4 * N * C + 4 * K + 4 * N * K);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, V, io),
                     ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, V, 0));
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 0, N, C, V, io), 0);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, V, io), 2 * N * K);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 0, N, C, V, DS_MM16_IN), ds_ws_part(4 * V));
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, V, DS_MM16_OUT), 2 * N * K + 2 * N * C);
    /* rows 16-byte aligned (OC % 8 == 0): read in place on cuda */
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, 50304, io), 0);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, 3072, io), 0);
    /* a copied chunk's rows are padded to 8 elements (16 bytes) on cuda: OC = 37 in one
     * chunk takes 40 columns a row; cpu and sim unchanged */
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, 37, io), 2 * N * 40);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_HALF, 1, N, C, 37, 0), 2 * N * 40 + 2 * N * C);
    assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, 37, 0),
                     ds_ws_part(4 * 37 * C) + 4 * N * C + ds_ws_part(4 * 37) + ds_ws_part(4 * N * 37));
    assert_int_equal(ds_matmul16_ld(1105), 1112); /* the head's last chunk: 50,257 - 12 * 4096 */
    assert_int_equal(ds_matmul16_ld(4096), 4096);
}

/* 16-bit activations give the bits of the fp32 composition they replace: a 16-bit input
 * those of its widened copy, a 16-bit output the fp32 output rounded once per element, a
 * 16-bit output gradient those of its widened copy (matmul16 rounds an fp32 one to the
 * same values); every io16 combination, every gradient, in one and in three chunks. */
static void check_half_io(ds_half h, const shape *s, int io16) {
    int N = s->N, C = s->C, OC = s->OC, in16 = io16 & DS_MM16_IN, out16 = io16 & DS_MM16_OUT;
    size_t nx = (size_t)N * C, ny = (size_t)N * OC, nw = (size_t)OC * C;
    uint16_t *x16 = rand16(h, nx), *y16 = rand16(h, ny), *w = rand16(h, nw);
    uint16_t *b = rand16(h, (size_t)OC), *out16v = malloc(ny * 2);
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
    ds_half_to_f32(h, x, x16, nx);
    ds_half_to_f32(h, dy, y16, ny);
    /* forward: the reference on the fp32 (widened) input, fp32 out */
    void *ws = nan_workspace(h, 0, s, 0), *ws16 = nan_workspace(h, 0, s, io16);
    ds_matmul16_forward(h, y, x, 0, w, b, N, C, OC, ws);
    ds_matmul16_forward(h, out16 ? (void *)out16v : (void *)y2, in16 ? (void *)x16 : (void *)x,
                        io16, w, b, N, C, OC, ws16);
    if (out16) {
        uint16_t *want = malloc(ny * 2);
        ds_half_from_f32(h, want, y, ny);
        assert_memory_equal(out16v, want, ny * 2);
        free(want);
    } else {
        assert_memory_equal(y2, y, ny * 4);
    }
    free(ws), free(ws16);
    /* backward: every gradient from the fp32 (widened) dout and input */
    float *dx = tu_randf(nx, -1, 1), *dx2 = tu_copyf(dx, nx);
    uint16_t *dw = rand16(h, nw), *db = rand16(h, (size_t)OC);
    uint16_t *dw2 = malloc(nw * 2), *db2 = malloc((size_t)OC * 2);
    memcpy(dw2, dw, nw * 2);
    memcpy(db2, db, (size_t)OC * 2);
    ws = nan_workspace(h, 1, s, 0), ws16 = nan_workspace(h, 1, s, io16);
    ds_matmul16_backward(h, dx, 1, dw, db, dy, x, 0, w, N, C, OC, ws);
    ds_matmul16_backward(h, dx2, 1, dw2, db2, out16 ? (void *)y16 : (void *)dy,
                         in16 ? (void *)x16 : (void *)x, io16, w, N, C, OC, ws16);
    assert_memory_equal(dx2, dx, nx * 4);
    assert_memory_equal(dw2, dw, nw * 2);
    assert_memory_equal(db2, db, (size_t)OC * 2);
    free(ws), free(ws16), free(x16), free(y16), free(w), free(b), free(out16v), free(x),
        free(dy), free(y), free(y2), free(dx), free(dx2), free(dw), free(db), free(dw2),
        free(db2);
}

static void test_half_activations_bits(void **state) {
    (void)state;
    tu_seed(18);
    for (int hh = 0; hh < 2; hh++)
        for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++)
            for (int io = 1; io <= (DS_MM16_IN | DS_MM16_OUT); io++)
                check_half_io(hh ? DS_HALF_F16 : DS_HALF_BF16, &SHAPES[k], io);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_one_rounding_per_call),
        cmocka_unit_test(test_dinp_by_chunks),
        cmocka_unit_test(test_workspace_bounded),
        cmocka_unit_test(test_half_activations_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
