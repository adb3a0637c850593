/* An active Dropout that ends a Residual's branch fuses into the Residual's add
 * (ops->fuses_into_add): y = x + dropout(f) in one kernel, no Dropout output buffer; a
 * checkpoint span ending in such a Residual keeps its sum (no copy) and does not run
 * the sum nor mlp.c_proj again. Checked against the unfused path, the same stage with
 * its Dropouts' ops lacking the hook (forward then the Residual's add_forward, the span
 * copying its output and recomputing all of itself, as before): two GPT blocks with
 * dropout 0.1 in fp32 and bf16, checkpoint none and per block give the same output,
 * d(input) and parameter gradients, bit for bit; each Residual calls dropout_add_forward
 * instead of dropout_forward and add_forward, in forward and where a span recomputes it;
 * without checkpointing the activations held after the step are 2 NBLOCKS [N, C] fp32
 * buffers fewer; with per-block spans the peak is 3 fewer (one span recomputed at a
 * time: its two Dropouts' and the copy of its output), a span runs one Linear forward
 * and makes one copy fewer. Runs on the device DS_ENGINE_DEVICE names (cpu, sim). */
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

enum { B = 2, T = 8, C = 16, NH = 2, NBLOCKS = 2 };
static const float P = 0.1f;

/* The Dropout's ops without the fused hook: what the Residual then runs is the path
 * before the fusion. */
static ds_layer_ops unfused_ops;

static void unfuse(ds_layer *l) {
    for (int i = 0; i < l->nchild; i++) unfuse(l->child[i]);
    if (strcmp(l->ops->kind, "Dropout") != 0) return;
    unfused_ops = *l->ops;
    unfused_ops.fuses_into_add = NULL;
    unfused_ops.forward_add = NULL;
    l->ops = &unfused_ops;
}

typedef struct step_result {
    eng_step_bytes b;
    uint64_t fused_calls, dropout_calls, add_calls, gemms, copies; /* the step's */
    size_t act_after, act_peak;
} step_result;

/* One training step of stage s, d(output) a fixed pattern */
static step_result run_step(ds_stage *s) {
    ds_err err = {{0}};
    ds_tensor *x = eng_input(B, T, C);
    ds_run r = {.train = 1, .seed = 3, .step = 2, .micro = 1};
    step_result res = {0};
    ds_mem_reset_peaks();
    if (ds_kernel_count_install(ds_device_get(), &err) != 0) fail_msg("%s", err.msg);
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    ds_tensor *out = (ds_tensor *)ds_stage_output(s);
    res.b.out = eng_bytes(out), res.b.out_n = ds_tensor_nbytes(out); /* to_host: not a copy */
    eng_grad_pattern(out);
    if (ds_stage_backward(s, out, &err) != 0) fail_msg("%s", err.msg);
    ds_kernel_count_uninstall();
    res.fused_calls = eng_kcount("dropout_add_forward").calls;
    res.dropout_calls = eng_kcount("dropout_forward").calls;
    res.add_calls = eng_kcount("add_forward").calls;
    res.gemms = eng_kcount("matmul_forward").calls + eng_kcount("matmul16_forward").calls;
    res.copies = ds_kernel_count_get(DS_KCOUNT_COPY).calls;
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    res.act_after = st.current[DS_MEM_ACTIVATIONS];
    res.act_peak = st.peak[DS_MEM_ACTIVATIONS];
    res.b.din = eng_bytes(s->grad_in), res.b.din_n = ds_tensor_nbytes(s->grad_in);
    res.b.grads = eng_bytes(s->flat_grads), res.b.grads_n = ds_tensor_nbytes(s->flat_grads);
    ds_tensor_free(x);
    ds_stage_free(s);
    ds_layer_images_free();
    return res;
}

static void check_blocks(ds_dtype prec, int checkpoint) {
    char what[64];
    snprintf(what, sizeof what, "%s checkpoint %d", ds_dtype_name(prec), checkpoint);
    ds_stage *plain = eng_blocks_stage(NBLOCKS, C, NH, prec, checkpoint, P);
    unfuse(plain->root);
    step_result ref = run_step(plain);
    step_result got = run_step(eng_blocks_stage(NBLOCKS, C, NH, prec, checkpoint, P));
    printf("%s: activations held after the step %zu bytes (unfused %zu), peak %zu (%zu)\n",
           what, got.act_after, ref.act_after, got.act_peak, ref.act_peak);
    eng_same_step(&got.b, &ref.b, what, "the unfused path");
    printf("%s: %llu fused calls (unfused: %llu dropout, %llu add), %llu Linear forwards "
           "(%llu), %llu copies (%llu)\n", what, (unsigned long long)got.fused_calls,
           (unsigned long long)ref.dropout_calls, (unsigned long long)ref.add_calls,
           (unsigned long long)got.gemms, (unsigned long long)ref.gemms,
           (unsigned long long)got.copies, (unsigned long long)ref.copies);
    /* two Residuals a block, each one fused kernel instead of dropout then add; a span
     * recomputes its first Residual, not its kept second one (nor its mlp.c_proj) */
    uint64_t runs = 2 * NBLOCKS, recomputed = checkpoint ? 2 * NBLOCKS : 0;
    assert_int_equal(got.fused_calls, runs + recomputed / 2);
    assert_int_equal(got.dropout_calls + got.add_calls, 0);
    assert_int_equal(ref.fused_calls, 0);
    assert_int_equal(ref.dropout_calls, runs + recomputed);
    assert_int_equal(ref.add_calls, runs + recomputed);
    assert_int_equal(got.gemms, 4 * NBLOCKS + (checkpoint ? 3 * NBLOCKS : 0));
    assert_int_equal(ref.gemms, 4 * NBLOCKS + (checkpoint ? 4 * NBLOCKS : 0));
    assert_int_equal(ref.copies - got.copies, checkpoint ? NBLOCKS : 0); /* span outputs */
    size_t nc = (size_t)(B * T * C) * sizeof(float);
    if (checkpoint == 0) {
        assert_int_equal(ref.act_after - got.act_after, 2 * NBLOCKS * nc);
    } else {
        assert_int_equal(ref.act_after, got.act_after); /* spans keep no Dropout buffer */
        assert_int_equal(ref.act_peak - got.act_peak, 3 * nc);
    }
    eng_step_bytes_free(&ref.b);
    eng_step_bytes_free(&got.b);
}

static void test_blocks_fp32(void **state) {
    (void)state;
    for (int ck = 0; ck <= 1; ck++) check_blocks(DS_F32, ck);
}

static void test_blocks_bf16(void **state) {
    (void)state;
    for (int ck = 0; ck <= 1; ck++) check_blocks(DS_BF16, ck);
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_fp32),
        cmocka_unit_test(test_blocks_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
