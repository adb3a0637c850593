/* A Sequential passes the gradients of a run of children that may be called in place
 * (ops->grad_in_place) in one buffer, each child's din its dout: a Residual so called
 * makes no din = dout copy, its branch adds into dout. Checked against the copy path,
 * the same layers' backward called with a fresh buffer per boundary (each Residual then
 * copies, as every one did before): GPT blocks in fp32, bf16 and fp16, checkpoint none
 * and per block, without Dropouts, with inactive ones and with active ones give the same
 * output, d(input) and parameter gradients, bit for bit; the stage's backward copies
 * once (its output gradient, which it may not overwrite, into the buffer the whole
 * residual stream's gradients then share) where the copy path copies twice a block, and
 * holds 2 NBLOCKS - 1 [N, C] gradient buffers fewer. Where aliasing would be wrong
 * (a Residual over one leaf, whose GEMM would read its output; a Residual over a
 * Residual, whose din += dout would double it) nothing is aliased, the results are the
 * copy path's, and an in-place call is refused. Runs on the device DS_ENGINE_DEVICE
 * names (cpu, sim). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_test_stage.h"
#include "kernel_count.h"

enum { B = 2, T = 8, C = 16, NH = 2, NBLOCKS = 2, MAXBUF = 16 };

/* ---- the copy path ---------------------------------------------------------------------- */

typedef struct fresh {
    ds_tensor *t[MAXBUF];
    int n;
} fresh;

/* A new fp32 gradient buffer shaped like `like`, counted as activations (as a
 * Sequential's boundary gradient is) */
static ds_tensor *fresh_grad(fresh *f, const ds_tensor *like) {
    ds_err err = {{0}};
    assert_true(f->n < MAXBUF);
    ds_tensor **slot = &f->t[f->n++];
    if (ds_tensor_ensure_uninit(slot, DS_F32, DS_MEM_ACTIVATIONS, like->ndim, like->shape, &err))
        fail_msg("%s", err.msg);
    return *slot;
}

/* The backward of a tree of Sequentials over Residuals (and leaves) as it was before
 * aliasing: every boundary gets a buffer of its own, so no child is called in place and
 * every Residual copies its dout into its din before its branch adds. */
static void copy_path(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                      ds_tensor *din, fresh *f) {
    ds_err err = {{0}};
    if (strcmp(l->ops->kind, "Sequential") != 0) {
        if (ds_layer_backward(l, r, in, dout, din, 0, &err) != 0) fail_msg("%s", err.msg);
        return;
    }
    const ds_tensor *d = dout;
    for (int i = l->nchild - 1; i >= 0; i--) {
        ds_tensor *dx = i ? fresh_grad(f, l->child[i - 1]->out) : din;
        copy_path(l->child[i], r, i ? l->child[i - 1]->out : in, d, dx, f);
        d = dx;
    }
}

/* ---- one step ----------------------------------------------------------------------------- */

typedef struct step_result {
    eng_step_bytes b;
    uint64_t copies;  /* backward's device-to-device copies */
    size_t act_after; /* activation bytes held after backward */
} step_result;

/* One training step of stage s, d(output) a fixed pattern, counting its backward; through
 * the stage (aliasing) or the copy path */
static step_result run_step(ds_stage *s, int copying) {
    ds_err err = {{0}};
    ds_tensor *x = eng_input(B, T, C);
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    ds_tensor *out = (ds_tensor *)ds_stage_output(s);
    step_result res = {.b = {.out = eng_bytes(out), .out_n = ds_tensor_nbytes(out)}};
    eng_grad_pattern(out);
    fresh f = {.n = 0};
    if (ds_kernel_count_install(ds_device_get(), &err) != 0) fail_msg("%s", err.msg);
    ds_tensor *din = NULL;
    if (copying) {
        din = fresh_grad(&f, s->last_in);
        copy_path(s->root, &s->run, s->last_in, out, din, &f);
    } else if (ds_stage_backward(s, out, &err) != 0) {
        fail_msg("%s", err.msg);
    }
    ds_kernel_count_uninstall();
    if (!copying) din = s->grad_in;
    res.copies = ds_kernel_count_get(DS_KCOUNT_COPY).calls;
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    res.act_after = st.current[DS_MEM_ACTIVATIONS];
    res.b.din = eng_bytes(din), res.b.din_n = ds_tensor_nbytes(din);
    res.b.grads = eng_bytes(s->flat_grads), res.b.grads_n = ds_tensor_nbytes(s->flat_grads);
    for (int i = 0; i < f.n; i++) ds_tensor_free(f.t[i]);
    ds_tensor_free(x);
    ds_stage_free(s);
    ds_layer_images_free();
    return res;
}

static void check_blocks(ds_dtype prec, int checkpoint, float p) {
    char what[96];
    snprintf(what, sizeof what, "%s checkpoint %d dropout %g", ds_dtype_name(prec), checkpoint,
             (double)p);
    step_result ref = run_step(eng_blocks_stage(NBLOCKS, C, NH, prec, 0, p), 1);
    step_result got = run_step(eng_blocks_stage(NBLOCKS, C, NH, prec, checkpoint, p), 0);
    printf("%s: backward copies %llu (copy path %llu), activations held after it %zu bytes "
           "(copy path %zu)\n", what, (unsigned long long)got.copies,
           (unsigned long long)ref.copies, got.act_after, ref.act_after);
    eng_same_step(&got.b, &ref.b, what, "the copy path");
    /* the stage's output gradient into the stream's one buffer; two a block before */
    assert_int_equal(got.copies, 1);
    assert_int_equal(ref.copies, 2 * NBLOCKS);
    if (checkpoint == 0) /* no buffer between blocks, none between a block's Residuals */
        assert_int_equal(ref.act_after - got.act_after,
                         (2 * NBLOCKS - 1) * (size_t)(B * T * C) * sizeof(float));
    eng_step_bytes_free(&ref.b);
    eng_step_bytes_free(&got.b);
}

static void check_precision(ds_dtype prec) {
    const float p[] = {-1.0f, 0.0f, 0.25f};
    for (int ck = 0; ck <= 1; ck++)
        for (int i = 0; i < 3; i++) check_blocks(prec, ck, p[i]);
}

static void test_blocks_fp32(void **state) {
    (void)state;
    check_precision(DS_F32);
}

static void test_blocks_bf16(void **state) {
    (void)state;
    check_precision(DS_BF16);
}

static void test_blocks_fp16(void **state) {
    (void)state;
    check_precision(DS_F16);
}

/* ---- where aliasing would be wrong -------------------------------------------------------- */

static ds_layer *linear(void) {
    ds_err err = {{0}};
    return eng_named(ds_linear_new(C, C, 1, 0.2f, &err), "lin");
}

static ds_layer *seq_of(ds_layer *a, ds_layer *b) {
    ds_err err = {{0}};
    ds_layer *s = ds_sequential_new(&err);
    assert_non_null(s);
    assert_int_equal(ds_layer_add_child(s, a, &err), 0);
    if (b) assert_int_equal(ds_layer_add_child(s, b, &err), 0);
    return s;
}

/* named (parameter names are unique in a stage) */
static ds_layer *residual(ds_layer *branch, const char *name) {
    ds_err err = {{0}};
    return eng_named(ds_residual_new(branch, &err), name);
}

static ds_layer *layernorm(void) {
    ds_err err = {{0}};
    return eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln");
}

/* Residual(Linear), Residual(Sequential(Linear)), Residual(Residual(Sequential(LayerNorm,
 * Linear))): no Residual among them may be called in place, so a stage of them aliases
 * nothing and each Residual copies; results the copy path's */
static ds_stage *unsafe_stage(ds_dtype prec) {
    ds_layer *l[3] = {residual(linear(), "a"), residual(seq_of(linear(), NULL), "b"),
                      residual(residual(seq_of(layernorm(), linear()), "d"), "c")};
    return eng_stage("unsafe", l, 3, prec, 0);
}

static void test_unsafe_branches_keep_copies(void **state) {
    (void)state;
    const ds_dtype prec[] = {DS_F32, DS_BF16};
    for (int k = 0; k < 2; k++) {
        step_result ref = run_step(unsafe_stage(prec[k]), 1);
        step_result got = run_step(unsafe_stage(prec[k]), 0);
        printf("%s Residual(Linear), Residual(Sequential(Linear)), Residual(Residual(...)): "
               "backward copies %llu (copy path %llu)\n", ds_dtype_name(prec[k]),
               (unsigned long long)got.copies, (unsigned long long)ref.copies);
        eng_same_step(&got.b, &ref.b, "unsafe branches", "the copy path");
        /* each Residual's din = dout but the nested one's, din += dout (acc = 1) */
        assert_int_equal(got.copies, 3);
        assert_int_equal(ref.copies, 3);
        eng_step_bytes_free(&ref.b);
        eng_step_bytes_free(&got.b);
    }
}

/* What the kinds answer */
static void test_answers(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_run train = {.train = 1, .seed = 3}, eval = {.train = 0};
    ds_layer *lin = linear(), *empty = ds_sequential_new(&err);
    ds_layer *safe = residual(seq_of(layernorm(), linear()), "");
    ds_layer *one_leaf = residual(seq_of(linear(), NULL), "");
    ds_layer *nested = residual(residual(seq_of(layernorm(), linear()), ""), "");
    ds_layer *dropped = residual(seq_of(linear(), ds_dropout_new(0.5f, &err)), "");
    ds_layer *ck = ds_checkpoint_new(residual(seq_of(layernorm(), linear()), ""), &err);
    ds_layer *block = eng_gpt_block("h", C, NH, 0.0f);
    assert_non_null(ck);
    assert_false(ds_layer_grad_in_place(lin, &train, 0));
    assert_false(ds_layer_grad_in_place(empty, &train, 0)); /* its din = dout */
    assert_false(ds_layer_grad_in_place(empty, &train, 1));
    assert_true(ds_layer_grad_in_place(safe, &train, 0));
    assert_false(ds_layer_grad_in_place(safe, &train, 1)); /* din += dout: twice dout */
    assert_false(ds_layer_grad_in_place(one_leaf, &train, 0));
    assert_false(ds_layer_grad_in_place(nested, &train, 0));
    /* its Dropout runs backward in training only: then a branch of two children */
    assert_true(ds_layer_grad_in_place(dropped, &train, 0));
    assert_false(ds_layer_grad_in_place(dropped, &eval, 0));
    assert_true(ds_layer_grad_in_place(ck, &train, 0));
    assert_true(ds_layer_grad_in_place(block, &train, 0));
    assert_true(ds_layer_grad_in_place(block, &train, 1)); /* two children: read, then add */
    ds_layer_free(block), ds_layer_free(ck), ds_layer_free(dropped), ds_layer_free(nested);
    ds_layer_free(one_leaf), ds_layer_free(safe), ds_layer_free(empty), ds_layer_free(lin);
}

/* ds_layer_backward refuses din == dout where the layer does not allow it */
static void refused(ds_layer *l, const ds_stage *s, const ds_tensor *in, int acc) {
    ds_err err = {{0}};
    ds_tensor *g = (ds_tensor *)l->out;
    assert_int_equal(ds_layer_backward(l, &s->run, in, g, g, acc, &err), -1);
    printf("%s in place, acc = %d: %s\n", l->ops->kind, acc, err.msg);
    assert_non_null(strstr(err.msg, "in place"));
}

static void test_refused(void **state) {
    (void)state;
    ds_err err = {{0}};
    ds_layer *l[2] = {residual(linear(), "a"), residual(seq_of(layernorm(), linear()), "b")};
    ds_stage *s = eng_stage("refused", l, 2, DS_F32, 0);
    ds_tensor *x = eng_input(B, T, C);
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    ds_layer *one_leaf = s->root->child[0], *safe = s->root->child[1];
    refused(one_leaf->child[0], s, s->last_in, 0); /* the Linear */
    refused(one_leaf, s, s->last_in, 0);
    refused(safe, s, one_leaf->out, 1);
    ds_tensor_free(x);
    ds_stage_free(s);
    ds_layer_images_free();
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_fp32),
        cmocka_unit_test(test_blocks_bf16),
        cmocka_unit_test(test_blocks_fp16),
        cmocka_unit_test(test_unsafe_branches_keep_copies),
        cmocka_unit_test(test_answers),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
