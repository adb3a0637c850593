/* The CPU table's backward entries that produce an input gradient, in both of its modes
 * (kernel_table.h: acc = 1 adds into dinp / dqkv, acc = 0 writes it): writing over a
 * buffer of NaNs gives the bits of accumulating into zeros, but for the sign of a zero
 * (x + 0 is +0 where x is -0), and the parameter gradients, which accumulate either
 * way, the same bits. Shapes past the kernels' blocks and parallel chunks: matmul16 over
 * more than DS_MATMUL16_COLS outputs (its first chunk writes, the next add), the fused
 * attention over T past its 64-row chunks (dk, dv written by the chunk holding the key,
 * added by the later ones), GELU past its 8192-element chunks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernel_table.h"
#include "kernels.h"
#include "kernels_testutil.h"

#define K ds_cpu_kernels

static float *filled(size_t n, float v) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

static void *nan_ws(size_t bytes) {
    void *ws = malloc(bytes ? bytes : 1);
    memset(ws, 0xFF, bytes); /* every float a NaN */
    return ws;
}

static int zero_signs; /* elements where the two modes differ only in the sign of a zero */

/* written (acc = 0 over NaNs) against accumulated (acc = 1 into zeros), bit for bit but
 * the sign of a zero */
static void same_bits(const char *what, const float *wrote, const float *added, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(&wrote[i], &added[i], sizeof(float))) continue;
        if (wrote[i] == 0.0f && added[i] == 0.0f) {
            zero_signs++;
            continue;
        }
        fail_msg("%s[%zu]: written %.9g, accumulated %.9g", what, i, (double)wrote[i],
                 (double)added[i]);
    }
}

/* a 16-bit copy of n values in [-r, r] in format h, and those values as fp32 in *f */
static uint16_t *rand16(ds_half h, size_t n, float r, float **f) {
    float *x = tu_randf(n, -r, r);
    uint16_t *y = malloc(n * 2);
    ds_half_from_f32(h, y, x, n);
    ds_half_to_f32(h, x, y, n);
    *f = x;
    return y;
}

static void check_matmul(int N, int C, int OC) {
    size_t ni = (size_t)N * C, nw = (size_t)OC * C;
    float *inp = tu_randf(ni, -1, 1), *w = tu_randf(nw, -1, 1);
    float *dout = tu_randf((size_t)N * OC, -1, 1);
    float *a = filled(ni, 0), *b = filled(ni, NAN);
    float *dwa = filled(nw, 0), *dwb = filled(nw, 0), *dba = filled((size_t)OC, 0),
          *dbb = filled((size_t)OC, 0);
    K.matmul_backward(a, 1, dwa, dba, dout, inp, w, N, C, OC);
    K.matmul_backward(b, 0, dwb, dbb, dout, inp, w, N, C, OC);
    same_bits("matmul dinp", b, a, ni);
    assert_memory_equal(dwa, dwb, nw * 4);
    assert_memory_equal(dba, dbb, (size_t)OC * 4);
    free(inp), free(w), free(dout), free(a), free(b), free(dwa), free(dwb), free(dba), free(dbb);
}

static void check_matmul16(ds_half h, int N, int C, int OC, int io16) {
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inf, *doutf, *wf;
    uint16_t *in16 = rand16(h, ni, 1, &inf), *dout16 = rand16(h, no, 1, &doutf);
    uint16_t *w = rand16(h, nw, 1, &wf);
    const void *inp = io16 & DS_MM16_IN ? (const void *)in16 : inf;
    const void *dout = io16 & DS_MM16_OUT ? (const void *)dout16 : doutf;
    float *a = filled(ni, 0), *b = filled(ni, NAN);
    uint16_t *dwa = calloc(nw, 2), *dwb = calloc(nw, 2), *dba = calloc((size_t)OC, 2),
             *dbb = calloc((size_t)OC, 2);
    size_t bytes = ds_matmul16_workspace(DS_GEMM16_F32, 1, (size_t)N, (size_t)C, (size_t)OC, io16);
    void *ws = nan_ws(bytes);
    K.matmul16_backward(h, a, 1, dwa, dba, dout, inp, io16, w, N, C, OC, ws);
    memset(ws, 0xFF, bytes);
    K.matmul16_backward(h, b, 0, dwb, dbb, dout, inp, io16, w, N, C, OC, ws);
    same_bits("matmul16 dinp", b, a, ni);
    assert_memory_equal(dwa, dwb, nw * 2);
    assert_memory_equal(dba, dbb, (size_t)OC * 2);
    free(inf), free(doutf), free(wf), free(in16), free(dout16), free(w), free(a), free(b),
        free(dwa), free(dwb), free(dba), free(dbb), free(ws);
}

static void test_matmul(void **state) {
    (void)state;
    tu_seed(1);
    check_matmul(7, 13, 11);
    check_matmul(128, 128, 256); /* the sgemm split over threads */
    for (int io16 = 0; io16 < 4; io16++) {
        check_matmul16(DS_HALF_BF16, 5, 24, 40, io16);
        check_matmul16(DS_HALF_F16, 5, 24, 40, io16);
    }
    check_matmul16(DS_HALF_BF16, 3, 16, DS_MATMUL16_COLS + 37, 0); /* two chunks */
    check_matmul16(DS_HALF_F16, 3, 16, 2 * DS_MATMUL16_COLS + 1, DS_MM16_OUT);
}

static void check_gelu(size_t n) {
    float *inp = tu_randf(n, -4, 4), *dout = tu_randf(n, -1, 1);
    float *a = filled(n, 0), *b = filled(n, NAN);
    K.gelu_backward(a, 1, inp, dout, n);
    K.gelu_backward(b, 0, inp, dout, n);
    same_bits("gelu dinp", b, a, n);
    for (int h = DS_HALF_BF16; h <= DS_HALF_F16; h++) {
        float *xf;
        uint16_t *x = rand16((ds_half)h, n, 4, &xf);
        memset(a, 0, n * 4), memset(b, 0xFF, n * 4);
        K.gelu16_backward((ds_half)h, a, 1, x, dout, n, 0);
        K.gelu16_backward((ds_half)h, b, 0, x, dout, n, 0);
        same_bits("gelu16 dinp", b, a, n);
        free(xf), free(x);
    }
    free(inp), free(dout), free(a), free(b);
}

static void test_gelu(void **state) {
    (void)state;
    tu_seed(2);
    check_gelu(5);
    check_gelu(3 * 8192 + 517);
}

static void check_layernorm(int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = tu_randf(n, -2, 2), *dout = tu_randf(n, -1, 1), *w = tu_randf((size_t)C, -1, 1),
          *bias = tu_randf((size_t)C, -1, 1);
    float *y = malloc(n * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    K.layernorm_forward(y, mean, rstd, inp, w, bias, N, C, 1e-5f);
    float *a = filled(n, 0), *b = filled(n, NAN);
    float *dwa = filled((size_t)C, 0), *dwb = filled((size_t)C, 0), *dba = filled((size_t)C, 0),
          *dbb = filled((size_t)C, 0);
    K.layernorm_backward(a, 1, dwa, dba, dout, inp, w, mean, rstd, N, C);
    K.layernorm_backward(b, 0, dwb, dbb, dout, inp, w, mean, rstd, N, C);
    same_bits("layernorm dinp", b, a, n);
    assert_memory_equal(dwa, dwb, (size_t)C * 4);
    assert_memory_equal(dba, dbb, (size_t)C * 4);
    for (int h = DS_HALF_BF16; h <= DS_HALF_F16; h++) {
        uint16_t *w16 = malloc((size_t)C * 2), *ga = calloc((size_t)C * 2, 2),
                 *gb = calloc((size_t)C * 2, 2);
        ds_half_from_f32((ds_half)h, w16, w, (size_t)C);
        void *ws = nan_ws(ds_layernorm16_workspace(1, (size_t)C));
        memset(a, 0, n * 4), memset(b, 0xFF, n * 4);
        K.layernorm16_backward((ds_half)h, a, 1, ga, ga + C, dout, inp, w16, mean, rstd, N, C, ws);
        K.layernorm16_backward((ds_half)h, b, 0, gb, gb + C, dout, inp, w16, mean, rstd, N, C, ws);
        same_bits("layernorm16 dinp", b, a, n);
        assert_memory_equal(ga, gb, (size_t)C * 4);
        free(w16), free(ga), free(gb), free(ws);
    }
    free(inp), free(dout), free(w), free(bias), free(y), free(mean), free(rstd), free(a), free(b),
        free(dwa), free(dwb), free(dba), free(dbb);
}

static void test_layernorm(void **state) {
    (void)state;
    tu_seed(3);
    check_layernorm(9, 50);
    check_layernorm(64, 768); /* rows over the threads */
}

/* the [B,NH,T,T] kernels, with dropout p (0: the plain entry) */
static void check_attention(int B, int T, int C, int NH, float p) {
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    ds_rng_key key = {.seed = 7, .step = 2, .layer = 3, .micro = 1, .offset = 0};
    float *qkv = tu_randf(nx, -2, 2), *dout = tu_randf(ny, -1, 1);
    float *y = malloc(ny * 4), *att = malloc(na * 4), *scratch = malloc(na * 4);
    float *a = filled(nx, 0), *b = filled(nx, NAN);
    if (p > 0) {
        K.attention_forward_dropout(y, att, qkv, B, T, C, NH, p, key);
        K.attention_backward_dropout(a, 1, scratch, dout, qkv, att, B, T, C, NH, p, key);
        K.attention_backward_dropout(b, 0, scratch, dout, qkv, att, B, T, C, NH, p, key);
    } else {
        K.attention_forward(y, att, qkv, B, T, C, NH);
        K.attention_backward(a, 1, scratch, dout, qkv, att, B, T, C, NH);
        K.attention_backward(b, 0, scratch, dout, qkv, att, B, T, C, NH);
    }
    same_bits("attention dqkv", b, a, nx);
    free(qkv), free(dout), free(y), free(att), free(scratch), free(a), free(b);
}

/* the fused pair, fp32 and (in16) 16-bit qkv */
static void check_fused(int B, int T, int C, int NH, float p) {
    ds_rng_key key = {.seed = 9, .step = 4, .layer = 1, .micro = 2, .offset = 3};
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = tu_randf(nx, -2, 2), *dout = tu_randf(ny, -1, 1);
    float *y = malloc(ny * 4), *lse = malloc(nl * 4), *scratch = malloc(nl * 4);
    float *a = filled(nx, 0), *b = filled(nx, NAN);
    K.attention_forward_fused(y, lse, qkv, B, T, C, NH, p, key);
    K.attention_backward_fused(a, 1, scratch, dout, qkv, y, lse, B, T, C, NH, p, key);
    K.attention_backward_fused(b, 0, scratch, dout, qkv, y, lse, B, T, C, NH, p, key);
    same_bits("fused attention dqkv", b, a, nx);
    for (int h = DS_HALF_BF16; h <= DS_HALF_F16; h++) {
        float *xf;
        uint16_t *x = rand16((ds_half)h, nx, 2, &xf);
        size_t N = (size_t)B * T;
        void *ws = nan_ws(ds_attention16_workspace(DS_ATTN16_F32, 0, N, (size_t)C, 1, 0, 0));
        K.attention16_forward_fused((ds_half)h, y, lse, x, B, T, C, NH, p, key, 1, 0, ws);
        free(ws);
        ws = nan_ws(ds_attention16_workspace(DS_ATTN16_F32, 1, N, (size_t)C, 1, 0, 0));
        memset(a, 0, nx * 4), memset(b, 0xFF, nx * 4);
        K.attention16_backward_fused((ds_half)h, a, 1, scratch, dout, x, y, lse, B, T, C, NH, p,
                                     key, 1, 0, 0, ws);
        K.attention16_backward_fused((ds_half)h, b, 0, scratch, dout, x, y, lse, B, T, C, NH, p,
                                     key, 1, 0, 0, ws);
        same_bits("fused attention16 dqkv", b, a, nx);
        free(xf), free(x), free(ws);
    }
    free(qkv), free(dout), free(y), free(lse), free(scratch), free(a), free(b);
}

static void test_attention(void **state) {
    (void)state;
    tu_seed(4);
    check_attention(2, 37, 24, 3, 0.0f); /* T not a multiple of the 4-row blocks */
    check_attention(2, 37, 24, 3, 0.25f);
    check_fused(2, 37, 24, 3, 0.0f);
    check_fused(2, 37, 24, 3, 0.25f);
    check_fused(1, 150, 64, 2, 0.0f); /* three 64-row chunks */
    check_fused(1, 150, 64, 2, 0.25f);
}

static void check_dropout(size_t n, float p) {
    ds_rng_key key = {.seed = 11, .step = 1, .layer = 2, .micro = 0, .offset = 5};
    float *dout = tu_randf(n, -1, 1), *a = filled(n, 0), *b = filled(n, NAN);
    K.dropout_backward(a, 1, dout, n, p, key);
    K.dropout_backward(b, 0, dout, n, p, key);
    same_bits("dropout dinp", b, a, n);
    free(dout), free(a), free(b);
}

static void test_dropout(void **state) {
    (void)state;
    tu_seed(5);
    check_dropout(1001, 0.3f);
    check_dropout(70000, 0.1f); /* over the threads */
    check_dropout(33, 0.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),    cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_layernorm), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_dropout),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    printf("elements differing only in the sign of a zero: %d\n", zero_signs);
    return rc;
}
