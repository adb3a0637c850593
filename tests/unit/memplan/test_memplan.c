/* The memory planner's C interface on described stages (no memory): model-state lines
 * against the ZeRO formulas on the flat layout, checkpointing shrinking what is kept (a
 * span ending in a Residual over an MLP keeps its sum, with dropout too),
 * the ring and buckets at world > 1, the costs, and a description refusing to compute.
 * Predictions against the allocation counters of real runs: tests/integration/memplan. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "memplan.h"
#include "stage.h"

/* Linear(16 -> 64), GELU, Linear(64 -> 10): 1088 + 650 parameters. */
static ds_stage *describe(ds_dtype prec) {
    ds_err err = {{0}};
    ds_layer *l[3] = {ds_linear_new(16, 64, 1, 0.02f, &err), ds_gelu_new(&err),
                      ds_linear_new(64, 10, 1, 0.02f, &err)};
    for (int i = 0; i < 3; i++) assert_non_null(l[i]);
    snprintf(l[0]->name, sizeof l[0]->name, "fc1");
    snprintf(l[2]->name, sizeof l[2]->name, "fc2");
    ds_stage_opts o = {.zero = 0, .checkpoint = 0, .precision = prec};
    ds_stage *s = ds_stage_describe("mlp", l, 3, &o, 1, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

static ds_mp_job job_of(int world) {
    return (ds_mp_job){.world = world, .batch_ndim = 2, .batch = {8, 16}, .batch_dtype = DS_F32,
                       .targets = 8, .accum = 1, .optim = DS_MP_ADAMW, .prefetch = 1,
                       .host_device = 1, .gloo = 1, .gemm_flops = 1e9, .link_bytes_s = 1e9};
}

static ds_mp_pred predict(ds_stage *s, int zero, int ckpt, ds_dtype prec, int world) {
    ds_mp_model m = {&s, 1};
    ds_mp_choice c = {zero, ckpt, prec};
    ds_mp_job job = job_of(world);
    ds_mp_pred p;
    ds_err err = {{0}};
    assert_int_equal(ds_mp_predict(&m, &c, &job, 2, &p, &err), 0);
    return p;
}

static void test_model_states(void **state) {
    (void)state;
    ds_stage *s = describe(DS_F32);
    size_t n = s->numel; /* parameters padded to 16 elements each */
    assert_int_equal(n, 1088 + 656);
    size_t b0 = 0;
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    b0 = st.total_current;
    for (int world = 1; world <= 4; world *= 2)
        for (int z = 0; z <= 3; z++) {
            if (world == 1 && z > 0) continue;
            ds_mp_pred p = predict(s, z, 0, DS_F32, world);
            size_t shard = (n + (size_t)world - 1) / (size_t)world, full = z ? shard * (size_t)world : n;
            size_t params = z == 3 ? shard * 4 : full * 4, grads = z >= 2 ? shard * 4 : full * 4;
            size_t moments = (z ? shard : n) * 8;
            assert_int_equal(p.cat_after[DS_MEM_PARAMS], params);
            assert_int_equal(p.cat_after[DS_MEM_GRADS], grads);
            assert_int_equal(p.cat_after[DS_MEM_OPTIMIZER], moments);
            assert_true(p.total_peak >= params + grads + moments);
            /* Gloo's ring once a reduce-scatter ran (ZeRO 1-3 at world > 1) */
            assert_int_equal(p.cat_after[DS_MEM_COMM] >= DS_COMM_GLOO_RING_BYTES, world > 1 && z > 0);
            assert_int_equal(p.comm_bytes == 0, world == 1);
        }
    ds_mem_get_stats(&st);
    assert_int_equal(st.total_current, b0); /* a description allocates nothing */
    ds_stage_free(s);
}

static void test_bf16_masters(void **state) {
    (void)state;
    ds_stage *s = describe(DS_BF16);
    ds_mp_pred p = predict(s, 0, 0, DS_BF16, 1);
    assert_int_equal(p.cat_after[DS_MEM_PARAMS], s->numel * 2);
    assert_int_equal(p.cat_after[DS_MEM_OPTIMIZER], s->numel * 12); /* master + m + v */
    assert_true(p.line_peak[DS_MP_IMAGES] > 0); /* the 16-bit layers' kernel workspace */
    ds_stage_free(s);
}

/* A bf16 stage keeps fc1's and GELU's outputs (8 x 64 each: GELU and fc2 take 16 bits)
 * in 2 bytes instead of 4, and fc1's output gradient (GELU writes it in 16 bits for fc1's
 * backward); fc2's output (the logits) and the other gradients stay fp32. */
static void test_bf16_activations(void **state) {
    (void)state;
    ds_stage *s = describe(DS_BF16);
    ds_mp_pred f32 = predict(s, 0, 0, DS_F32, 1), bf16 = predict(s, 0, 0, DS_BF16, 1);
    assert_int_equal(f32.line_peak[DS_MP_ACT_KEPT] - bf16.line_peak[DS_MP_ACT_KEPT],
                     2 * 8 * 64 * 2);
    assert_int_equal(f32.line_peak[DS_MP_ACT_GRADS] - bf16.line_peak[DS_MP_ACT_GRADS],
                     8 * 64 * 2);
    /* inside a checkpoint span of the three layers too */
    f32 = predict(s, 0, 3, DS_F32, 1), bf16 = predict(s, 0, 3, DS_BF16, 1);
    assert_int_equal(f32.line_peak[DS_MP_ACT_KEPT], bf16.line_peak[DS_MP_ACT_KEPT]);
    assert_true(bf16.line_peak[DS_MP_RECOMPUTE] < f32.line_peak[DS_MP_RECOMPUTE]);
    ds_stage_free(s);
}

static void test_checkpointing(void **state) {
    (void)state;
    ds_stage *s = describe(DS_F32);
    /* one span of the three layers: only its output is kept, fc2's own (fc2's backward
     * needs only its input: the span neither copies its output nor runs fc2 again) */
    ds_mp_pred none = predict(s, 0, 0, DS_F32, 1), full = predict(s, 0, 3, DS_F32, 1);
    assert_true(full.line_peak[DS_MP_ACT_KEPT] < none.line_peak[DS_MP_ACT_KEPT]);
    assert_true(full.line_peak[DS_MP_RECOMPUTE] > 0);
    assert_int_equal(none.line_peak[DS_MP_RECOMPUTE], 0);
    /* one more forward of the span but fc2: 2 * B * 16*64 multiply-adds */
    assert_true(none.recompute_flops == 0);
    assert_true(full.recompute_flops == 2.0 * 8 * 16 * 64);
    assert_true(full.flops == 3.0 * 2.0 * 8 * (16 * 64 + 64 * 10));
    assert_true(full.flops == none.flops);
    assert_true(full.step_s > none.step_s);
    /* every layer a span of its own, each needing only its input: nothing recomputed,
     * no copy, so what no checkpointing holds, to the byte */
    ds_mp_pred one = predict(s, 0, 1, DS_F32, 1);
    assert_true(one.recompute_flops == 0);
    assert_int_equal(one.cat_peak[DS_MEM_ACTIVATIONS], none.cat_peak[DS_MEM_ACTIVATIONS]);
    assert_int_equal(one.total_peak, none.total_peak);
    ds_stage_free(s);
}

/* Residual(Sequential(Linear(16 -> 64), GELU, Linear(64 -> 16), Dropout(p))), GPT's MLP
 * branch */
static ds_stage *describe_residual(float p) {
    ds_err err = {{0}};
    ds_layer *fc1 = ds_linear_new(16, 64, 1, 0.02f, &err);
    ds_layer *fc2 = ds_linear_new(64, 16, 1, 0.02f, &err);
    ds_layer *seq = ds_sequential_new(&err);
    assert_non_null(fc1), assert_non_null(fc2), assert_non_null(seq);
    snprintf(fc1->name, sizeof fc1->name, "fc1");
    snprintf(fc2->name, sizeof fc2->name, "fc2");
    ds_layer *kids[4] = {fc1, ds_gelu_new(&err), fc2, ds_dropout_new(p, &err)};
    for (int i = 0; i < 4; i++)
        if (ds_layer_add_child(seq, kids[i], &err) != 0) fail_msg("%s", err.msg);
    ds_layer *res = ds_residual_new(seq, &err);
    assert_non_null(res);
    ds_stage_opts o = {.zero = 0, .checkpoint = 0, .precision = DS_F32};
    ds_stage *s = ds_stage_describe("res", &res, 1, &o, 1, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

/* A span ending in that Residual keeps its sum and recomputes fc1 alone, whether the
 * Dropout passes through (p = 0) or computes the sum (p > 0: fused into the add); with
 * p > 0 the Dropout keeps no B x 16 fp32 mask (the sum is its) */
static void test_residual_span(void **state) {
    (void)state;
    for (int k = 0; k < 2; k++) {
        ds_stage *s = describe_residual(k ? 0.1f : 0.0f);
        ds_mp_pred none = predict(s, 0, 0, DS_F32, 1), span = predict(s, 0, 1, DS_F32, 1);
        assert_true(none.recompute_flops == 0);
        assert_true(span.recompute_flops == 2.0 * 8 * 16 * 64);
        /* kept: fc1's and GELU's outputs [8, 64], fc2's [8, 16], the sum [8, 16], the
         * loss per row [8]: no mask */
        assert_int_equal(none.line_peak[DS_MP_ACT_KEPT], 4 * (2 * 8 * 64 + 2 * 8 * 16 + 8));
        ds_stage_free(s);
    }
}

static void test_description_refuses(void **state) {
    (void)state;
    ds_stage *s = describe(DS_F32);
    ds_err err = {{0}};
    int64_t shape[2] = {8, 16};
    ds_tensor *x = ds_tensor_new(DS_F32, DS_MEM_DATA, 2, shape, &err);
    assert_non_null(x);
    ds_run r = {0};
    assert_int_equal(ds_stage_forward(s, x, &r, &err), -1);
    assert_non_null(strstr(err.msg, "description for the memory planner"));
    ds_tensor_free(x);
    ds_mp_model m = {&s, 1};
    ds_mp_choice bad = {4, 0, DS_F32};
    ds_mp_job job = job_of(1);
    ds_mp_pred p;
    assert_int_equal(ds_mp_predict(&m, &bad, &job, 2, &p, &err), -1);
    assert_non_null(strstr(err.msg, "is not a choice"));
    job.targets = 7; /* the logits have 8 rows */
    ds_mp_choice ok = {0, 0, DS_F32};
    assert_int_equal(ds_mp_predict(&m, &ok, &job, 2, &p, &err), -1);
    assert_non_null(strstr(err.msg, "7 targets for 8 rows"));
    ds_stage_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_states),
        cmocka_unit_test(test_bf16_masters),
        cmocka_unit_test(test_bf16_activations),
        cmocka_unit_test(test_checkpointing),
        cmocka_unit_test(test_residual_span),
        cmocka_unit_test(test_description_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
