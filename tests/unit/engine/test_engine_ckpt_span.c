/* A checkpoint span whose trailing layer's backward needs only its input (ops->input_only:
 * Linear, GELU, the embeddings) keeps that layer's output as the span's output and does not
 * run that layer again before its backward: the head's span of GPT (ln_f, lm_head) runs
 * lm_head's GEMM once per step, not twice, and holds the logits once. Counted through the
 * device's kernel table (every Linear forward is one matmul call), with every output and
 * gradient bit-identical to the run without checkpointing; a span ending in a layer that
 * needs its forward (LayerNorm, Attention) still recomputes all of itself. A stage of
 * Linears and a GELU checkpointed layer by layer holds what it holds without
 * checkpointing, to the byte. A span of GPT blocks, ending in a Residual whose branch ends
 * in mlp.c_proj (then a Dropout, passing through or, with dropout, computing the sum),
 * keeps the Residual's sum and does not run mlp.c_proj again, bit-identical too. Its second step zeroes none of the activations and gradients it allocates again
 * (kernel_count.h's alloc_zero), all written before they are read (on sim: NaN until
 * written), with the same bits. Runs on the device DS_ENGINE_DEVICE names (cpu, sim). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "engine_test_stage.h"
#include "kernel_count.h"

enum { B = 2, T = 8, C = 16, NH = 2, V = 37 };

/* ---- counting Linear forwards: the device's kernel table with its two GEMM forwards
 * wrapped (sim's entries queue the CPU kernels: a call is counted as it is queued) ---- */

static const ds_kernel_table *g_real;
static ds_kernel_table g_counting;
static int g_gemms;

static void count_mm(float *out, const float *inp, const float *weight, const float *bias, int N,
                     int Cin, int OC) {
    g_gemms++;
    g_real->matmul_forward(out, inp, weight, bias, N, Cin, OC);
}

static void count_mm16(ds_half h, void *out, const void *inp, int io16, const uint16_t *weight,
                       const uint16_t *bias, int N, int Cin, int OC, void *ws) {
    g_gemms++;
    g_real->matmul16_forward(h, out, inp, io16, weight, bias, N, Cin, OC, ws);
}

static int setup(void **state) {
    (void)state;
    ds_device *d = ds_device_get();
    g_real = d->k;
    g_counting = *g_real;
    g_counting.matmul_forward = count_mm;
    g_counting.matmul16_forward = count_mm16;
    d->k = &g_counting;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    ds_device_get()->k = g_real;
    return 0;
}

/* ---- stages ------------------------------------------------------------------------ */

/* ln_1, c_attn, attention, c_proj, ln_f, lm_head: three Linears, and layers that need
 * their forward (LayerNorm, Attention) */
static ds_stage *gpt_stage(ds_dtype prec, int checkpoint) {
    ds_err err = {{0}};
    ds_layer *l[6] = {eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_1"),
                      eng_named(ds_linear_new(C, 3 * C, 1, 0.2f, &err), "c_attn"),
                      ds_attention_new(NH, 0.0f, &err),
                      eng_named(ds_linear_new(C, C, 1, 0.2f, &err), "c_proj"),
                      eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_f"),
                      eng_named(ds_linear_new(C, V, 0, 0.5f, &err), "lm_head")};
    assert_non_null(l[2]);
    ds_stage_opts o = {.zero = 0, .checkpoint = checkpoint, .precision = prec};
    ds_stage *s = ds_stage_new("gpt", l, 6, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

/* c_fc, GELU, c_proj: every layer input_only */
static ds_stage *mlp_stage(int checkpoint) {
    ds_err err = {{0}};
    ds_layer *l[3] = {eng_named(ds_linear_new(C, 4 * C, 1, 0.2f, &err), "c_fc"),
                      ds_gelu_new(&err),
                      eng_named(ds_linear_new(4 * C, C, 1, 0.2f, &err), "c_proj")};
    assert_non_null(l[1]);
    ds_stage_opts o = {.zero = 0, .checkpoint = checkpoint, .precision = DS_F32};
    ds_stage *s = ds_stage_new("mlp", l, 3, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

/* two GPT blocks, dropout p */
static ds_stage *blocks_stage(ds_dtype prec, int checkpoint, float p) {
    return eng_blocks_stage(2, C, NH, prec, checkpoint, p);
}

/* A stage's run: its output, d(input) and parameter gradients as bytes, the Linear
 * forwards it called, its activation peak over the step (from what it held before). */
typedef struct run_result {
    unsigned char *out, *din, *grads;
    size_t out_n, din_n, grads_n;
    int gemms;
    size_t act_peak;
} run_result;

/* One forward and one backward with d(output) = a fixed pattern written over the output,
 * as the criterion writes d(logits) over the logits. */
static run_result run_step(ds_stage *s) {
    ds_err err = {{0}};
    ds_tensor *x = eng_input(B, T, C);
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    size_t base = st.current[DS_MEM_ACTIVATIONS];
    ds_mem_reset_peaks();
    g_gemms = 0;
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    run_result res = {0};
    ds_tensor *out = (ds_tensor *)ds_stage_output(s);
    res.out = eng_bytes(out), res.out_n = ds_tensor_nbytes(out);
    size_t n = (size_t)out->numel;
    float *d = malloc(n * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = (float)((i * 37) % 11) / 16.0f - 0.3f;
    if (out->dtype != DS_F32) fail_msg("the stage's output is %s", ds_dtype_name(out->dtype));
    if (ds_tensor_from_host(out, 0, n, d, &err) != 0) fail_msg("%s", err.msg);
    free(d);
    if (ds_stage_backward(s, out, &err) != 0) fail_msg("%s", err.msg);
    res.gemms = g_gemms;
    /* the output still holds its gradient (model.output after backward: docs/lua-api.md) */
    assert_ptr_equal(ds_stage_output(s), out);
    assert_int_equal(ds_tensor_nbytes(out), res.out_n);
    res.din = eng_bytes(s->grad_in), res.din_n = ds_tensor_nbytes(s->grad_in);
    res.grads = eng_bytes(s->flat_grads), res.grads_n = ds_tensor_nbytes(s->flat_grads);
    ds_mem_get_stats(&st);
    res.act_peak = st.peak[DS_MEM_ACTIVATIONS] - base;
    ds_tensor_free(x);
    return res;
}

static void same(const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
                 const char *what, int ck) {
    if (na != nb || memcmp(a, b, na))
        fail_msg("checkpoint %d: %s not bit-identical to no checkpointing", ck, what);
}

static void result_free(run_result *r) {
    free(r->out);
    free(r->din);
    free(r->grads);
}

/* Linear forwards per step: 3 without checkpointing; a span recomputes its Linears but a
 * kept trailing one. */
static void check_gpt(ds_dtype prec) {
    static const struct {
        int checkpoint, gemms;
    } CASES[] = {
        {1, 3}, /* every layer a span: a span of one Linear runs nothing again */
        {2, 3}, /* (ln_1, c_attn) (attention, c_proj) (ln_f, lm_head): each ends in a Linear */
        {3, 5}, /* (ln_1, c_attn, attention): c_attn again; (c_proj, ln_f, lm_head): c_proj */
        {6, 5}, /* one span ending in lm_head: c_attn and c_proj again */
    };
    ds_stage *s = gpt_stage(prec, 0);
    run_result ref = run_step(s);
    ds_stage_free(s);
    assert_int_equal(ref.gemms, 3);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int ck = CASES[i].checkpoint;
        s = gpt_stage(prec, ck);
        run_result r = run_step(s);
        printf("%s checkpoint %d: %d Linear forwards, activation peak %zu bytes (none: %zu)\n",
               ds_dtype_name(prec), ck, r.gemms, r.act_peak, ref.act_peak);
        assert_int_equal(r.gemms, CASES[i].gemms);
        same(ref.out, ref.out_n, r.out, r.out_n, "the output", ck);
        same(ref.din, ref.din_n, r.din, r.din_n, "d(input)", ck);
        same(ref.grads, ref.grads_n, r.grads, r.grads_n, "the parameter gradients", ck);
        /* a second step on the same stage: the kept output is written again, not copied */
        result_free(&r);
        r = run_step(s);
        assert_int_equal(r.gemms, CASES[i].gemms);
        result_free(&r);
        ds_stage_free(s);
    }
    result_free(&ref);
    ds_layer_images_free();
}

/* GPT's blocks (gpt.lua checkpoints them, not the head): a block ends in a Residual whose
 * branch ends in mlp.c_proj, then a Dropout that passes through (p = 0) or computes the
 * sum (p > 0: fused into the Residual's add), so its span keeps the Residual's sum and
 * runs neither it nor mlp.c_proj again: one Linear forward fewer per span. */
static void check_blocks(ds_dtype prec, float p) {
    static const struct {
        int checkpoint, gemms;
    } CASES[] = {
        {1, 8 + 6}, /* each block a span: c_attn, attn.c_proj, c_fc again */
        {2, 8 + 7}, /* one span of both: all but the second block's mlp.c_proj */
    };
    ds_stage *s = blocks_stage(prec, 0, p);
    run_result ref = run_step(s);
    ds_stage_free(s);
    assert_int_equal(ref.gemms, 8);
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        int ck = CASES[i].checkpoint, want = CASES[i].gemms;
        s = blocks_stage(prec, ck, p);
        /* the second step (its gradients add to the first's): the kept sum written again */
        for (int step = 0; step < 2; step++) {
            run_result r = run_step(s);
            printf("%s blocks, dropout %g, checkpoint %d: %d Linear forwards, activation peak "
                   "%zu bytes (none: %zu)\n", ds_dtype_name(prec), (double)p, ck, r.gemms,
                   r.act_peak, ref.act_peak);
            assert_int_equal(r.gemms, want);
            same(ref.out, ref.out_n, r.out, r.out_n, "the output", ck);
            same(ref.din, ref.din_n, r.din, r.din_n, "d(input)", ck);
            if (step == 0)
                same(ref.grads, ref.grads_n, r.grads, r.grads_n, "the parameter gradients", ck);
            result_free(&r);
        }
        ds_stage_free(s);
    }
    result_free(&ref);
    ds_layer_images_free();
}

static void test_blocks_fp32(void **state) {
    (void)state;
    check_blocks(DS_F32, 0.0f);
}

static void test_blocks_bf16(void **state) {
    (void)state;
    check_blocks(DS_BF16, 0.0f);
}

static void test_blocks_dropout(void **state) {
    (void)state;
    check_blocks(DS_F32, 0.25f);
    check_blocks(DS_BF16, 0.25f);
}

static void test_fp32(void **state) {
    (void)state;
    check_gpt(DS_F32);
}

static void test_bf16(void **state) {
    (void)state;
    check_gpt(DS_BF16);
}

/* Every layer input_only, each its own span: the spans keep the layers' outputs and run
 * nothing again, so the step holds exactly what it holds without checkpointing (with a
 * copy per span, as before, each output was there twice). */
static void test_spans_of_one_hold_no_copy(void **state) {
    (void)state;
    ds_stage *s = mlp_stage(0);
    run_result ref = run_step(s);
    ds_stage_free(s);
    s = mlp_stage(1);
    run_result r = run_step(s);
    assert_int_equal(ref.gemms, 2);
    assert_int_equal(r.gemms, 2);
    same(ref.grads, ref.grads_n, r.grads, r.grads_n, "the parameter gradients", 1);
    same(ref.din, ref.din_n, r.din, r.din_n, "d(input)", 1);
    assert_int_equal(r.act_peak, ref.act_peak);
    result_free(&r);
    result_free(&ref);
    ds_stage_free(s);
}

/* Step 2 of a stage (the step that recycles step 1's memory), its parameter gradients
 * zeroed first, with the device's memory ops counted when count is set: its results and
 * the bytes its fresh allocations zeroed (kernel_count.h's alloc_zero). */
static run_result second_step(ds_stage *s, int count, ds_kcount *zeroed, ds_kcount *uninit) {
    run_result r = run_step(s);
    result_free(&r);
    ds_stage_zero_grad(s);
    ds_err err = {{0}};
    if (count && ds_kernel_count_install(ds_device_get(), &err) != 0) fail_msg("%s", err.msg);
    r = run_step(s);
    if (!count) return r;
    *zeroed = ds_kernel_count_get(DS_KCOUNT_ALLOC_ZERO);
    *uninit = ds_kernel_count_get(DS_KCOUNT_ALLOC_UNINIT);
    ds_kernel_count_uninstall();
    return r;
}

/* A checkpointed stage allocates again every step its spans' activations (in the forward
 * and in the recomputation before backward) and, released with their span, the
 * activation gradients at the boundaries of the Sequentials inside the spans (per GPT
 * block 14 N C floats in 6 buffers: in each branch one [N, C] after the LayerNorm;
 * [N, 3C] after c_attn, [N, C] after the attention, [N, 4C] after c_fc and after the
 * GELU; none between its two Residuals, which run in place, nor after a branch's core,
 * whose Dropout of p = 0 passes its gradient through). The layers write
 * every activation wholly and a boundary gradient's one contributor writes it (=), so
 * the device zeroes none of them (device.h's alloc_uninit: on sim each starts as NaNs)
 * and the results stay bit-identical to no checkpointing. Before, the step zeroed every
 * one of them: 76 allocations, 106,240 bytes in fp32. */
static void check_second_step_zeroes(ds_dtype prec) {
    const uint64_t N = B * T, blocks = 2;
    ds_stage *s = blocks_stage(prec, 0, 0.0f);
    run_result ref = second_step(s, 0, NULL, NULL);
    ds_stage_free(s);
    s = blocks_stage(prec, 1, 0.0f);
    ds_kcount zeroed = {0, 0, 0, 0}, uninit = {0, 0, 0, 0};
    run_result r = second_step(s, 1, &zeroed, &uninit);
    printf("%s blocks, checkpoint 1, step 2: %llu allocations zeroed, %llu bytes; %llu not "
           "zeroed\n", ds_dtype_name(prec), (unsigned long long)zeroed.calls,
           (unsigned long long)zeroed.bytes_written, (unsigned long long)uninit.calls);
    same(ref.out, ref.out_n, r.out, r.out_n, "the output", 1);
    same(ref.din, ref.din_n, r.din, r.din_n, "d(input)", 1);
    same(ref.grads, ref.grads_n, r.grads, r.grads_n, "the parameter gradients", 1);
    /* nothing on sim; on cpu the input run_step makes, a host tensor (zeroed, as a
     * script's), is in the device's memory too */
    const uint64_t host = ds_device_is_host(ds_device_get());
    assert_int_equal(zeroed.calls, host);
    assert_int_equal(zeroed.bytes_written, host * N * C * sizeof(float));
    assert_true(uninit.calls > 9 * blocks); /* the gradients and recomputed activations */
    result_free(&r);
    result_free(&ref);
    ds_stage_free(s);
    ds_layer_images_free();
}

static void test_second_step_zeroes_fp32(void **state) {
    (void)state;
    check_second_step_zeroes(DS_F32);
}

static void test_second_step_zeroes_bf16(void **state) {
    (void)state;
    check_second_step_zeroes(DS_BF16);
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_spans_of_one_hold_no_copy),
        cmocka_unit_test(test_blocks_fp32),
        cmocka_unit_test(test_blocks_bf16),
        cmocka_unit_test(test_blocks_dropout),
        cmocka_unit_test(test_second_step_zeroes_fp32),
        cmocka_unit_test(test_second_step_zeroes_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
