#include "engine_test_stage.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_layer *eng_named(ds_layer *l, const char *name) {
    assert_non_null(l);
    snprintf(l->name, sizeof l->name, "%s", name);
    return l;
}

ds_tensor *eng_input(int64_t B, int64_t T, int64_t C) {
    ds_err err = {{0}};
    int64_t shape[3] = {B, T, C};
    ds_tensor *x = ds_tensor_new_host(DS_F32, DS_MEM_DATA, 3, shape, &err);
    assert_non_null(x);
    uint32_t st = 11;
    for (int64_t i = 0; i < x->numel; i++) {
        st = st * 1664525u + 1013904223u;
        ((float *)x->data)[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
    }
    return x;
}

/* Residual(Sequential(norm, Sequential(proj_in, mid, proj_out) named inner, Dropout(p))) */
static ds_layer *residual_of(int C, const char *norm, const char *inner, ds_layer *proj_in,
                             ds_layer *mid, ds_layer *proj_out, float p) {
    ds_err err = {{0}};
    ds_layer *core = eng_named(ds_sequential_new(&err), inner), *branch = ds_sequential_new(&err);
    assert_non_null(branch);
    assert_int_equal(ds_layer_add_child(core, proj_in, &err), 0);
    assert_int_equal(ds_layer_add_child(core, mid, &err), 0);
    assert_int_equal(ds_layer_add_child(core, proj_out, &err), 0);
    ds_layer *ln = eng_named(ds_layernorm_new(C, 1e-5f, &err), norm);
    assert_int_equal(ds_layer_add_child(branch, ln, &err), 0);
    assert_int_equal(ds_layer_add_child(branch, core, &err), 0);
    if (p >= 0)
        assert_int_equal(ds_layer_add_child(branch, eng_named(ds_dropout_new(p, &err), ""), &err), 0);
    return eng_named(ds_residual_new(branch, &err), "");
}

ds_layer *eng_gpt_block(const char *name, int C, int NH, float p) {
    ds_err err = {{0}};
    ds_layer *b = eng_named(ds_sequential_new(&err), name);
    ds_layer *attn =
        residual_of(C, "ln_1", "attn", eng_named(ds_linear_new(C, 3 * C, 1, 0.2f, &err), "c_attn"),
                    ds_attention_new(NH, p < 0 ? 0.0f : p, &err),
                    eng_named(ds_linear_new(C, C, 1, 0.2f, &err), "c_proj"), p);
    ds_layer *mlp =
        residual_of(C, "ln_2", "mlp", eng_named(ds_linear_new(C, 4 * C, 1, 0.2f, &err), "c_fc"),
                    eng_named(ds_gelu_new(&err), ""),
                    eng_named(ds_linear_new(4 * C, C, 1, 0.2f, &err), "c_proj"), p);
    assert_int_equal(ds_layer_add_child(b, attn, &err), 0);
    assert_int_equal(ds_layer_add_child(b, mlp, &err), 0);
    return b;
}

ds_stage *eng_stage(const char *name, ds_layer **l, int n, ds_dtype prec, int checkpoint) {
    ds_err err = {{0}};
    ds_stage_opts o = {.zero = 0, .checkpoint = checkpoint, .precision = prec};
    ds_stage *s = ds_stage_new(name, l, n, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

ds_stage *eng_blocks_stage(int n, int C, int NH, ds_dtype prec, int checkpoint, float p) {
    ds_layer *l[16];
    assert_true(n <= 16);
    for (int i = 0; i < n; i++) {
        char name[16];
        snprintf(name, sizeof name, "h.%d", i);
        l[i] = eng_gpt_block(name, C, NH, p);
    }
    return eng_stage("blocks", l, n, prec, checkpoint);
}

void eng_grad_pattern(ds_tensor *t) {
    ds_err err = {{0}};
    size_t n = (size_t)t->numel;
    float *d = malloc(n * sizeof *d);
    assert_non_null(d);
    for (size_t i = 0; i < n; i++) d[i] = (float)((i * 37) % 11) / 16.0f - 0.3f;
    if (ds_tensor_from_host(t, 0, n, d, &err) != 0) fail_msg("%s", err.msg);
    free(d);
}

unsigned char *eng_bytes(const ds_tensor *t) {
    ds_err err = {{0}};
    unsigned char *b = malloc(ds_tensor_nbytes(t) + 1);
    assert_non_null(b);
    if (ds_tensor_to_host(t, 0, (size_t)t->numel, b, &err) != 0) fail_msg("%s", err.msg);
    return b;
}

static void same_bytes(const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
                       const char *what, const char *part, const char *other) {
    if (na != nb || memcmp(a, b, na)) fail_msg("%s: %s differs from %s's", what, part, other);
}

void eng_same_step(const eng_step_bytes *a, const eng_step_bytes *b, const char *what,
                   const char *other) {
    same_bytes(a->out, a->out_n, b->out, b->out_n, what, "the output", other);
    same_bytes(a->din, a->din_n, b->din, b->din_n, what, "d(input)", other);
    same_bytes(a->grads, a->grads_n, b->grads, b->grads_n, what, "the parameter gradients", other);
}

void eng_step_bytes_free(eng_step_bytes *b) { free(b->out), free(b->din), free(b->grads); }

ds_kcount eng_kcount(const char *name) {
    for (int i = 0; i < DS_KCOUNT_N; i++)
        if (!strcmp(ds_kernel_count_name(i), name)) return ds_kernel_count_get(i);
    fail_msg("the counting table has no slot %s", name);
    return (ds_kcount){0, 0, 0, 0};
}

int eng_open_device(void) {
    const char *dev = getenv("DS_ENGINE_DEVICE");
    ds_err err = {{0}};
    if (dev && *dev && strcmp(dev, "auto") && ds_device_open(dev, 0, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    return 0;
}
