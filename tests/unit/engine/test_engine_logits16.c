/* 16-bit logits (docs/precision.md): a bf16 or fp16 stage asked for a 16-bit output
 * (ds_stage_half_output, what ds.Model asks of its last stage for a CrossEntropy) ends in
 * its lm_head's 16-bit output; the criterion takes it, its loss the fp32 cross-entropy of
 * the widened logits to the bit, d(logits) written over them in their type; the stage's
 * backward takes that gradient, and every parameter gradient and d(input) is bit-identical
 * to the fp32-logits path given the same logits. Not asked, a stage's output is fp32;
 * a stage ending in a layer other than a Linear keeps an fp32 output.
 * Runs on the device DS_ENGINE_DEVICE names (cpu, sim). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "criterion.h"
#include "engine_test_stage.h"

enum { B = 2, T = 8, C = 16, NH = 2, V = 37 };

/* ln, c_attn, attention, c_proj, ln_f, lm_head: enough for 16-bit activations inside and
 * a head whose input is 16-bit too; last_gelu: a GELU after the head instead */
static ds_stage *stage(ds_dtype prec, int checkpoint, int last_gelu) {
    ds_err err = {{0}};
    ds_layer *l[7] = {eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_1"),
                      eng_named(ds_linear_new(C, 3 * C, 1, 0.2f, &err), "c_attn"),
                      ds_attention_new(NH, 0.0f, &err),
                      eng_named(ds_linear_new(C, C, 1, 0.2f, &err), "c_proj"),
                      eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_f"),
                      eng_named(ds_linear_new(C, V, 0, 0.5f, &err), "lm_head"),
                      last_gelu ? ds_gelu_new(&err) : NULL};
    assert_non_null(l[2]);
    ds_stage_opts o = {.zero = 0, .checkpoint = checkpoint, .precision = prec};
    ds_stage *s = ds_stage_new("gpt", l, last_gelu ? 7 : 6, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

static ds_tensor *targets(void) {
    ds_err err = {{0}};
    int64_t shape[2] = {B, T};
    ds_tensor *t = ds_tensor_new_host(DS_I32, DS_MEM_DATA, 2, shape, &err);
    assert_non_null(t);
    for (int i = 0; i < B * T; i++) ((int32_t *)t->data)[i] = i == 5 ? -1 : (i * 7) % V;
    return t;
}

static void forward(ds_stage *s, const ds_tensor *x) {
    ds_err err = {{0}};
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
}

/* t's values as fp32 on the host (a 16-bit tensor widened); free() them */
static float *values(const ds_tensor *t) {
    ds_err err = {{0}};
    size_t n = (size_t)t->numel;
    float *f = malloc(n * sizeof *f);
    void *raw = malloc(ds_tensor_nbytes(t));
    if (ds_tensor_to_host(t, 0, n, raw, &err) != 0) fail_msg("%s", err.msg);
    if (t->dtype == DS_F32) memcpy(f, raw, n * sizeof *f);
    else ds_half_to_f32(ds_half_of(t->dtype), f, raw, n);
    free(raw);
    return f;
}

static void same_bits(const ds_tensor *a, const ds_tensor *b, const char *what) {
    assert_int_equal(a->numel, b->numel);
    assert_int_equal(a->dtype, b->dtype);
    size_t n = ds_tensor_nbytes(a);
    unsigned char *x = malloc(n), *y = malloc(n);
    ds_err err = {{0}};
    if (ds_tensor_to_host(a, 0, (size_t)a->numel, x, &err) != 0 ||
        ds_tensor_to_host(b, 0, (size_t)b->numel, y, &err) != 0)
        fail_msg("%s", err.msg);
    if (memcmp(x, y, n)) fail_msg("%s: not the same bits", what);
    free(x);
    free(y);
}

/* Asked, with and without checkpointing: 16-bit logits, the loss to the bit the fp32
 * cross-entropy of them widened, the head's and every other gradient bit-identical to
 * the fp32-logits stage given those same logits (matmul16 rounds an fp32 d(logits) to
 * exactly the 16-bit one). */
static void check_logits16(ds_dtype h, int checkpoint, int fused) {
    ds_err err = {{0}};
    ds_stage *s16 = stage(h, checkpoint, 0), *ref = stage(h, checkpoint, 0);
    ds_stage_half_output(s16, 1);
    ds_tensor *x = eng_input(B, T, C), *y = targets();
    forward(s16, x);
    forward(ref, x);
    ds_tensor *lg16 = s16->root->out, *lg32 = ref->root->out;
    assert_int_equal(lg16->dtype, h);
    assert_int_equal(lg32->dtype, DS_F32);
    /* the same logits: the fp32 stage's replaced by the 16-bit ones widened */
    float *w = values(lg16);
    if (ds_tensor_from_host(lg32, 0, (size_t)lg32->numel, w, &err) != 0) fail_msg("%s", err.msg);
    free(w);
    ds_xent *c16 = ds_xent_new(&err), *c32 = ds_xent_new(&err);
    double loss16, loss32;
    ds_tensor *d16 = lg16, *d32 = lg32;
    float scale = 0.5f;
    if (fused) {
        if (ds_xent_forward_backward(c16, lg16, y, scale, &loss16, &err) != 0 ||
            ds_xent_forward_backward(c32, lg32, y, scale, &loss32, &err) != 0)
            fail_msg("%s", err.msg);
    } else if (ds_xent_forward(c16, lg16, y, &loss16, &err) != 0 ||
               ds_xent_forward(c32, lg32, y, &loss32, &err) != 0 ||
               ds_xent_backward(c16, scale, &d16, &err) != 0 ||
               ds_xent_backward(c32, scale, &d32, &err) != 0) {
        fail_msg("%s", err.msg);
    }
    printf("%s checkpoint %d %s: loss %.9g\n", ds_dtype_name(h), checkpoint,
           fused ? "forward_backward" : "forward, backward", loss16);
    assert_true(loss16 == loss32);
    assert_int_equal(d16->dtype, h); /* d(logits) over the logits, in their type */
    if (ds_stage_backward(s16, d16, &err) != 0 || ds_stage_backward(ref, d32, &err) != 0)
        fail_msg("%s", err.msg);
    same_bits(ref->flat_grads, s16->flat_grads, "parameter gradients");
    same_bits(ref->grad_in, s16->grad_in, "d(input)");
    assert_int_equal(s16->grad_in->dtype, DS_F32);
    ds_xent_free(c16);
    ds_xent_free(c32);
    ds_tensor_free(x);
    ds_tensor_free(y);
    ds_stage_free(s16);
    ds_stage_free(ref);
    ds_layer_images_free();
}

static void test_bf16(void **state) {
    (void)state;
    check_logits16(DS_BF16, 0, 1);
    check_logits16(DS_BF16, 0, 0);
    check_logits16(DS_BF16, 2, 1); /* lm_head in a checkpoint span */
}

static void test_fp16(void **state) {
    (void)state;
    check_logits16(DS_F16, 0, 1);
    check_logits16(DS_F16, 1, 0);
}

/* Not asked, or an fp32 stage, or a stage that does not end in a Linear: fp32 output. */
static void test_fp32_output_otherwise(void **state) {
    (void)state;
    ds_tensor *x = eng_input(B, T, C);
    ds_stage *s = stage(DS_BF16, 0, 0);
    forward(s, x);
    assert_int_equal(ds_stage_output(s)->dtype, DS_F32);
    ds_stage_free(s);
    s = stage(DS_F32, 0, 0);
    ds_stage_half_output(s, 1);
    forward(s, x);
    assert_int_equal(ds_stage_output(s)->dtype, DS_F32);
    ds_stage_free(s);
    s = stage(DS_BF16, 0, 1);
    ds_stage_half_output(s, 1);
    forward(s, x);
    assert_int_equal(ds_stage_output(s)->dtype, DS_F32);
    ds_stage_half_output(s, 0); /* and asked back: fp32 from the next forward */
    ds_stage_free(s);
    s = stage(DS_BF16, 0, 0);
    ds_stage_half_output(s, 1);
    forward(s, x);
    assert_int_equal(ds_stage_output(s)->dtype, DS_BF16);
    ds_stage_half_output(s, 0);
    forward(s, x);
    assert_int_equal(ds_stage_output(s)->dtype, DS_F32);
    ds_stage_free(s);
    ds_tensor_free(x);
    ds_layer_images_free();
}

/* A 16-bit gradient of another format than the stage's 16-bit output, or for an fp32
 * output: the stage's clear error (no layer reads it as fp32). */
static void test_refuses_other_half_grad(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_stage *s = stage(DS_BF16, 0, 0);
    ds_stage_half_output(s, 1);
    ds_tensor *x = eng_input(B, T, C);
    forward(s, x);
    int64_t shape[3] = {B, T, V};
    ds_tensor *d = ds_tensor_new(DS_F16, DS_MEM_ACTIVATIONS, 3, shape, &err);
    assert_non_null(d);
    ds_tensor_zero(d);
    assert_int_not_equal(ds_stage_backward(s, d, &err), 0);
    if (!strstr(err.msg, "gradient is fp16, expected fp32 or bf16"))
        fail_msg("unexpected error: %s", err.msg);
    /* a stage whose output is fp32 refuses any 16-bit gradient (its layers read fp32) */
    ds_stage_half_output(s, 0);
    forward(s, x);
    ds_tensor *b = ds_tensor_new(DS_BF16, DS_MEM_ACTIVATIONS, 3, shape, &err);
    assert_non_null(b);
    assert_int_not_equal(ds_stage_backward(s, b, &err), 0);
    if (!strstr(err.msg, "gradient is bf16, expected fp32"))
        fail_msg("unexpected error: %s", err.msg);
    ds_tensor_free(b);
    ds_tensor_free(d);
    ds_tensor_free(x);
    ds_stage_free(s);
    ds_layer_images_free();
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_fp32_output_otherwise),
        cmocka_unit_test(test_refuses_other_half_grad),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
