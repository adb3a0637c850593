/* The CPU's entries that take and give 16-bit activations (kernel_table.h's gelu16 and
 * attention16 pairs, layernorm16_forward's 16-bit output) against the composition the
 * engine ran before them: the 16-bit input widened with ds_half_to_f32, the fp32 kernel,
 * the fp32 output rounded with ds_half_from_f32. Every combination of a 16-bit and an
 * fp32 input and output, in bf16 and fp16, the same bits; lengths past the kernels'
 * stack blocks (512) and parallel chunks, rows wider than a block; workspaces full of
 * NaNs (nothing read before it is written). */
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

static void *nan_ws(size_t bytes) {
    float *ws = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes / sizeof *ws; i++) ws[i] = NAN;
    return ws;
}

/* n random values in [-r, r]: 16-bit in h (is16), else fp32; *f: them as fp32 */
static void *rand_act(ds_half h, size_t n, float r, int is16, float **f) {
    float *x = tu_randf(n, -r, r);
    if (!is16) return *f = x;
    uint16_t *y = malloc(n * 2);
    ds_half_from_f32(h, y, x, n);
    ds_half_to_f32(h, x, y, n);
    *f = x;
    return y;
}

/* the reference's output y (fp32) as the entry gives it: rounded into 16 bits (is16) */
static void *as_given(ds_half h, const float *y, size_t n, int is16) {
    void *o = malloc(n * (is16 ? 2 : 4));
    if (is16) ds_half_from_f32(h, o, y, n);
    else memcpy(o, y, n * 4);
    return o;
}

static void check_gelu(ds_half h, size_t n, int in16, int out16) {
    float *xf;
    void *x = rand_act(h, n, 4.0f, in16, &xf);
    float *y = malloc(n * 4);
    ds_gelu_forward(y, xf, n);
    void *want = as_given(h, y, n, out16), *got = malloc(n * (out16 ? 2 : 4));
    memset(got, 0xA5, n * (out16 ? 2 : 4));
    ds_gelu16_forward(h, got, x, n, in16, out16);
    assert_memory_equal(got, want, n * (out16 ? 2 : 4));
    if (in16) { /* backward reads the 16-bit input; dinp += */
        float *dout = tu_randf(n, -1, 1), *dinp = tu_randf(n, -1, 1), *wd = tu_copyf(dinp, n);
        ds_gelu_backward(wd, 1, xf, dout, n);
        ds_gelu16_backward(h, dinp, 1, x, dout, n, 0);
        assert_memory_equal(dinp, wd, n * 4);
        /* a 16-bit dinp: the fp32 one rounded once, written over garbage */
        ds_gelu_backward(wd, 0, xf, dout, n);
        uint16_t *want16 = as_given(h, wd, n, 1), *d16 = malloc(n * 2);
        memset(d16, 0xA5, n * 2);
        ds_gelu16_backward(h, d16, 0, x, dout, n, 1);
        assert_memory_equal(d16, want16, n * 2);
        free(dout), free(dinp), free(wd), free(want16), free(d16);
    }
    if (x != xf) free(x);
    free(xf), free(y), free(want), free(got);
}

/* rows of C past a 512-element block, into a 16-bit output */
static void check_layernorm_wide(ds_half h, int N, int C) {
    size_t n = (size_t)N * C;
    float *inp = tu_randf(n, -2, 2), *w = tu_randf((size_t)C, -1, 1), *b = tu_randf((size_t)C, -1, 1);
    uint16_t *w16 = malloc((size_t)C * 2), *b16 = malloc((size_t)C * 2);
    ds_half_from_f32(h, w16, w, (size_t)C), ds_half_to_f32(h, w, w16, (size_t)C);
    ds_half_from_f32(h, b16, b, (size_t)C), ds_half_to_f32(h, b, b16, (size_t)C);
    float *y = malloc(n * 4), *mean = malloc((size_t)N * 4), *rstd = malloc((size_t)N * 4);
    float *gm = malloc((size_t)N * 4), *gr = malloc((size_t)N * 4);
    ds_layernorm_forward(y, mean, rstd, inp, w, b, N, C, 1e-5f);
    uint16_t *want = as_given(h, y, n, 1), *got = malloc(n * 2);
    void *ws = nan_ws(ds_layernorm16_workspace(0, (size_t)C));
    ds_layernorm16_forward(h, got, gm, gr, inp, w16, b16, N, C, 1e-5f, 1, ws);
    assert_memory_equal(got, want, n * 2);
    assert_memory_equal(gm, mean, (size_t)N * 4);
    assert_memory_equal(gr, rstd, (size_t)N * 4);
    free(inp), free(w), free(b), free(w16), free(b16), free(y), free(mean), free(rstd), free(gm),
        free(gr), free(want), free(got), free(ws);
}

static void check_attention(ds_half h, int B, int T, int C, int NH, int in16, int out16, float p) {
    ds_rng_key key = {.seed = 21, .step = 5, .layer = 2, .micro = 1, .offset = 40};
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
    size_t N = (size_t)B * T;
    float *xf;
    void *x = rand_act(h, nx, 2.0f, in16, &xf);
    float *y = malloc(ny * 4), *lse = malloc(nl * 4), *glse = malloc(nl * 4);
    ds_attention_forward_fused(y, lse, xf, B, T, C, NH, p, key);
    void *want = as_given(h, y, ny, out16), *got = malloc(ny * (out16 ? 2 : 4));
    void *ws = nan_ws(ds_attention16_workspace(DS_ATTN16_F32, 0, N, (size_t)C, in16, out16, 0));
    ds_attention16_forward_fused(h, got, glse, x, B, T, C, NH, p, key, in16, out16, ws);
    assert_memory_equal(got, want, ny * (out16 ? 2 : 4));
    assert_memory_equal(glse, lse, nl * 4);
    free(ws);
    float *dout = tu_randf(ny, -1, 1), *dq = tu_randf(nx, -0.5f, 0.5f), *wdq = tu_copyf(dq, nx);
    ds_attention_backward_fused(wdq, 1, dout, xf, lse, B, T, C, NH, p, key);
    ws = nan_ws(ds_attention16_workspace(DS_ATTN16_F32, 1, N, (size_t)C, in16, out16, 0));
    ds_attention16_backward_fused(h, dq, 1, dout, x, lse, B, T, C, NH, p, key, in16, 0, ws);
    assert_memory_equal(dq, wdq, nx * 4);
    free(ws);
    /* a 16-bit dqkv: the fp32 one (dk, dv summed over chunks of query rows in fp32)
     * rounded once, written over garbage */
    ds_attention_backward_fused(wdq, 0, dout, xf, lse, B, T, C, NH, p, key);
    uint16_t *want16 = as_given(h, wdq, nx, 1), *d16 = malloc(nx * 2);
    memset(d16, 0xA5, nx * 2);
    ws = nan_ws(ds_attention16_workspace(DS_ATTN16_F32, 1, N, (size_t)C, in16, out16, 1));
    ds_attention16_backward_fused(h, d16, 0, dout, x, lse, B, T, C, NH, p, key, in16, 1, ws);
    assert_memory_equal(d16, want16, nx * 2);
    if (x != xf) free(x);
    free(xf), free(y), free(lse), free(glse), free(want), free(got), free(ws), free(dout),
        free(dq), free(wdq), free(want16), free(d16);
}

static void each_case(ds_half h) {
    tu_seed(h == DS_HALF_BF16 ? 31 : 32);
    for (int io = 1; io < 4; io++) {
        int in16 = io & 1, out16 = io >> 1;
        check_gelu(h, 5, in16, out16);
        check_gelu(h, 3 * 8192 + 517, in16, out16); /* chunks and blocks, a short tail */
        check_attention(h, 2, 37, 48, 3, in16, out16, 0.0f);
        check_attention(h, 1, 70, 64, 2, in16, out16, 0.0f);
        check_attention(h, 2, 37, 48, 3, in16, out16, 0.1f); /* attention dropout */
    }
    check_layernorm_wide(h, 9, 1100);
}

static void test_bf16(void **state) {
    (void)state;
    each_case(DS_HALF_BF16);
}

static void test_fp16(void **state) {
    (void)state;
    each_case(DS_HALF_F16);
}

/* The workspace: none on a device whose kernels take 16 bits; on the CPU the widened qkv
 * and the fp32 output (forward) or the fp32 dqkv before its rounding (backward, a 16-bit
 * dqkv), each part 256-byte aligned. */
static void test_workspace(void **state) {
    (void)state;
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_HALF, 0, 64, 48, 1, 1, 0), 0);
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_HALF, 1, 64, 48, 1, 1, 1), 0);
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 0, 64, 48, 1, 1, 0),
                     ds_ws_part(4 * 64 * 144) + ds_ws_part(4 * 64 * 48));
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 1, 64, 48, 1, 1, 0),
                     ds_ws_part(4 * 64 * 144));
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 1, 64, 48, 1, 1, 1),
                     2 * ds_ws_part(4 * 64 * 144));
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 0, 64, 48, 0, 1, 0),
                     ds_ws_part(4 * 64 * 48));
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 1, 64, 48, 0, 1, 0), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_workspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
