/* A stage's backward writes (=) every activation gradient that has one contributor (the
 * boundaries of a Sequential, the stage's input gradient) instead of zeroing it and adding
 * (+=) into it: GPT's blocks and head, fp32 and bf16, with and without checkpointing and
 * dropout, clear no memory in backward (the device's memset0, counted), and give the bits
 * of the same step run the accumulating way: a kernel table whose backward entries, asked
 * to write, zero their input gradient and add into it. Runs on the device
 * DS_ENGINE_DEVICE names (cpu, sim). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_stage.h"

enum { B = 2, T = 8, C = 16, NH = 2, V = 37 };

/* ---- counting the device's memsets and copies -------------------------------------- */

static const ds_device_ops *g_ops;
static ds_device_ops g_counting_ops;
static size_t g_memset_bytes, g_copy_bytes;

static void count_memset0(ds_device *d, void *p, size_t bytes) {
    g_memset_bytes += bytes;
    g_ops->memset0(d, p, bytes);
}

static void count_copy(ds_device *d, void *dst, const void *src, size_t bytes) {
    g_copy_bytes += bytes;
    g_ops->copy(d, dst, src, bytes);
}

/* ---- the accumulating kernel table: acc = 0 runs as zero, then acc = 1 ---------------- */

static const ds_kernel_table *g_real;
static ds_kernel_table g_accumulating;

/* through the counting memset0: what the accumulating way clears */
static void zero(void *p, size_t floats) {
    ds_device *d = ds_device_get();
    if (p) d->ops->memset0(d, p, floats * sizeof(float));
}

static void mm_b(float *dinp, int acc, float *dw, float *db, const float *dout, const float *inp,
                 const float *w, int N, int Cin, int OC) {
    if (!acc) zero(dinp, (size_t)N * Cin);
    g_real->matmul_backward(dinp, 1, dw, db, dout, inp, w, N, Cin, OC);
}

static void mm16_b(ds_half h, float *dinp, int acc, uint16_t *dw, uint16_t *db, const void *dout,
                   const void *inp, int io16, const uint16_t *w, int N, int Cin, int OC, void *ws) {
    if (!acc) zero(dinp, (size_t)N * Cin);
    g_real->matmul16_backward(h, dinp, 1, dw, db, dout, inp, io16, w, N, Cin, OC, ws);
}

static void gelu_b(float *dinp, int acc, const float *inp, const float *dout, size_t n) {
    if (!acc) zero(dinp, n);
    g_real->gelu_backward(dinp, 1, inp, dout, n);
}

/* a 16-bit input gradient is written whatever the table (no accumulating form) */
static void gelu16_b(ds_half h, void *dinp, int acc, const uint16_t *inp, const float *dout,
                     size_t n, int din16) {
    if (!acc && !din16) zero(dinp, n);
    g_real->gelu16_backward(h, dinp, !din16, inp, dout, n, din16);
}

static void ln_b(float *dinp, int acc, float *dw, float *db, const float *dout, const float *inp,
                 const float *w, const float *mean, const float *rstd, int N, int Cn) {
    if (!acc) zero(dinp, (size_t)N * Cn);
    g_real->layernorm_backward(dinp, 1, dw, db, dout, inp, w, mean, rstd, N, Cn);
}

static void ln16_b(ds_half h, float *dinp, int acc, uint16_t *dw, uint16_t *db, const float *dout,
                   const float *inp, const uint16_t *w, const float *mean, const float *rstd, int N,
                   int Cn, void *ws) {
    if (!acc) zero(dinp, (size_t)N * Cn);
    g_real->layernorm16_backward(h, dinp, 1, dw, db, dout, inp, w, mean, rstd, N, Cn, ws);
}

static void att_drop_b(float *dqkv, int acc, float *scratch, const float *dout, const float *qkv,
                       const float *att, int Bn, int Tn, int Cn, int NHn, float p, ds_rng_key k) {
    if (!acc) zero(dqkv, (size_t)Bn * Tn * 3 * Cn);
    g_real->attention_backward_dropout(dqkv, 1, scratch, dout, qkv, att, Bn, Tn, Cn, NHn, p, k);
}

static void att_fused_b(float *dqkv, int acc, float *scratch, const float *dout, const float *qkv,
                        const float *out, const float *lse, int Bn, int Tn, int Cn, int NHn,
                        float p, ds_rng_key k) {
    if (!acc) zero(dqkv, (size_t)Bn * Tn * 3 * Cn);
    g_real->attention_backward_fused(dqkv, 1, scratch, dout, qkv, out, lse, Bn, Tn, Cn, NHn, p, k);
}

static void att16_fused_b(ds_half h, void *dqkv, int acc, float *scratch, const float *dout,
                          const void *qkv, const void *out, const float *lse, int Bn, int Tn,
                          int Cn, int NHn, float p, ds_rng_key k, int in16, int out16, int din16,
                          void *ws) {
    if (!acc && !din16) zero(dqkv, (size_t)Bn * Tn * 3 * Cn);
    g_real->attention16_backward_fused(h, dqkv, !din16, scratch, dout, qkv, out, lse, Bn, Tn, Cn,
                                       NHn, p, k, in16, out16, din16, ws);
}

static void drop_b(float *dinp, int acc, const float *dout, size_t n, float p, ds_rng_key k) {
    if (!acc) zero(dinp, n);
    g_real->dropout_backward(dinp, 1, dout, n, p, k);
}

static int setup(void **state) {
    (void)state;
    ds_device *d = ds_device_get();
    g_ops = d->ops;
    g_counting_ops = *g_ops;
    g_counting_ops.memset0 = count_memset0;
    g_counting_ops.copy = count_copy;
    d->ops = &g_counting_ops;
    g_real = d->k;
    g_accumulating = *g_real;
    g_accumulating.matmul_backward = mm_b;
    g_accumulating.matmul16_backward = mm16_b;
    g_accumulating.gelu_backward = gelu_b;
    g_accumulating.gelu16_backward = gelu16_b;
    g_accumulating.layernorm_backward = ln_b;
    g_accumulating.layernorm16_backward = ln16_b;
    g_accumulating.attention_backward_dropout = att_drop_b;
    g_accumulating.attention_backward_fused = att_fused_b;
    g_accumulating.attention16_backward_fused = att16_fused_b;
    g_accumulating.dropout_backward = drop_b;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ds_device *d = ds_device_get();
    d->ops = g_ops;
    d->k = g_real;
    return 0;
}

/* ---- GPT's blocks and head ------------------------------------------------------------ */

/* Dropout(p), two blocks, ln_f, lm_head */
static ds_stage *gpt_stage(ds_dtype prec, int checkpoint, float p) {
    ds_err err = {{0}};
    ds_layer *l[5] = {ds_dropout_new(p, &err), eng_gpt_block("h.0", C, NH, p),
                      eng_gpt_block("h.1", C, NH, p),
                      eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_f"),
                      eng_named(ds_linear_new(C, V, 0, 0.5f, &err), "lm_head")};
    ds_stage_opts o = {.zero = 0, .checkpoint = checkpoint, .precision = prec};
    ds_stage *s = ds_stage_new("gpt", l, 5, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

static unsigned char *bytes_of(const ds_tensor *t, size_t *n) {
    *n = ds_tensor_nbytes(t);
    return eng_bytes(t);
}

typedef struct step_result {
    unsigned char *out, *din, *grads;
    size_t out_n, din_n, grads_n;
    size_t memset_bytes, copy_bytes; /* in backward */
} step_result;

/* Two steps (the second's parameter gradients add to the first's) on the kernel table k;
 * the memsets and copies of the second step's backward (the first allocates its buffers,
 * zeroed by the device) */
static step_result run_steps(ds_stage *s, const ds_kernel_table *k) {
    ds_err err = {{0}};
    ds_device_get()->k = k;
    ds_tensor *x = eng_input(B, T, C);
    step_result res = {0};
    for (int step = 0; step < 2; step++) {
        ds_run r = {.train = 1, .seed = 3, .step = (uint32_t)step};
        if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
        ds_tensor *out = (ds_tensor *)ds_stage_output(s);
        size_t n = (size_t)out->numel;
        float *d = malloc(n * sizeof *d);
        for (size_t i = 0; i < n; i++) d[i] = (float)((i * 37 + step) % 11) / 16.0f - 0.3f;
        if (step == 1) res.out = bytes_of(out, &res.out_n);
        if (ds_tensor_from_host(out, 0, n, d, &err) != 0) fail_msg("%s", err.msg);
        free(d);
        g_memset_bytes = g_copy_bytes = 0;
        if (ds_stage_backward(s, out, &err) != 0) fail_msg("%s", err.msg);
        res.memset_bytes = g_memset_bytes, res.copy_bytes = g_copy_bytes;
    }
    res.din = bytes_of(s->grad_in, &res.din_n);
    res.grads = bytes_of(s->flat_grads, &res.grads_n);
    ds_tensor_free(x);
    ds_device_get()->k = g_real;
    return res;
}

static void same(const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
                 const char *what) {
    if (na != nb || memcmp(a, b, na)) fail_msg("%s not bit-identical to accumulating", what);
}

static void result_free(step_result *r) {
    free(r->out);
    free(r->din);
    free(r->grads);
}

static void check(ds_dtype prec, int checkpoint, float p) {
    ds_stage *s = gpt_stage(prec, checkpoint, p);
    step_result ref = run_steps(s, &g_accumulating);
    ds_stage_free(s);
    s = gpt_stage(prec, checkpoint, p);
    step_result got = run_steps(s, g_real);
    ds_stage_free(s);
    ds_layer_images_free();
    printf("%s checkpoint %d dropout %g: backward memsets %zu bytes (accumulating: %zu), "
           "copies %zu bytes\n",
           ds_dtype_name(prec), checkpoint, (double)p, got.memset_bytes, ref.memset_bytes,
           got.copy_bytes);
    assert_int_equal(got.memset_bytes, 0);
    assert_true(ref.memset_bytes > 0); /* what writing saves: the count can tell */
    same(ref.out, ref.out_n, got.out, got.out_n, "the output");
    same(ref.din, ref.din_n, got.din, got.din_n, "d(input)");
    same(ref.grads, ref.grads_n, got.grads, got.grads_n, "the parameter gradients");
    result_free(&ref);
    result_free(&got);
}

static void test_fp32(void **state) {
    (void)state;
    for (int ck = 0; ck <= 2; ck++) check(DS_F32, ck, 0.0f);
}

static void test_bf16(void **state) {
    (void)state;
    for (int ck = 0; ck <= 2; ck++) check(DS_BF16, ck, 0.0f);
}

static void test_fp16(void **state) {
    (void)state;
    check(DS_F16, 0, 0.0f);
    check(DS_F16, 1, 0.0f);
}

static void test_dropout(void **state) {
    (void)state;
    check(DS_F32, 0, 0.25f);
    check(DS_F32, 1, 0.25f);
    check(DS_BF16, 1, 0.25f);
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
