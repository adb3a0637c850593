/* An inactive Dropout (p = 0, GPT's default: every residual branch ends in one) passes
 * its gradient through in backward: its Sequential hands the gradient after it to the
 * layer before it, so GPT blocks' backward makes no device copy for their Dropouts and
 * keeps no boundary gradient buffer for them. Counted through the counting kernel table
 * (kernels/kernel_count.h): the device copies in backward of two GPT blocks with p = 0
 * Dropouts are the blocks' without Dropouts, exactly one (the stage's output gradient
 * into the buffer the residual stream's gradients share: test_engine_grad_in_place); the
 * activation bytes are the same too, and so are the output, d(input) and parameter
 * gradients, bit for bit; fp32 and bf16, checkpoint none and per block. Runs on the
 * device DS_ENGINE_DEVICE names (cpu, sim). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_test_stage.h"
#include "kernel_count.h"

enum { B = 2, T = 8, C = 16, NH = 2, NBLOCKS = 2 };

typedef struct step_result {
    eng_step_bytes b;
    ds_kcount copies; /* backward's device-to-device copies */
    size_t act_peak, act_after; /* activation bytes: peak in backward, held after it */
} step_result;

/* One training step of a fresh stage, d(output) a fixed pattern, counting its backward */
static step_result run_step(ds_dtype prec, int checkpoint, float p) {
    ds_err err = {{0}};
    ds_stage *s = eng_blocks_stage(NBLOCKS, C, NH, prec, checkpoint, p); /* p < 0: no Dropouts */
    ds_tensor *x = eng_input(B, T, C);
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    ds_tensor *out = (ds_tensor *)ds_stage_output(s);
    step_result res = {.b = {.out = eng_bytes(out), .out_n = ds_tensor_nbytes(out)}};
    eng_grad_pattern(out);
    ds_mem_reset_peaks();
    if (ds_kernel_count_install(ds_device_get(), &err) != 0) fail_msg("%s", err.msg);
    if (ds_stage_backward(s, out, &err) != 0) fail_msg("%s", err.msg);
    ds_kernel_count_uninstall();
    res.copies = ds_kernel_count_get(DS_KCOUNT_COPY);
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    res.act_peak = st.peak[DS_MEM_ACTIVATIONS], res.act_after = st.current[DS_MEM_ACTIVATIONS];
    res.b.din = eng_bytes(s->grad_in), res.b.din_n = ds_tensor_nbytes(s->grad_in);
    res.b.grads = eng_bytes(s->flat_grads), res.b.grads_n = ds_tensor_nbytes(s->flat_grads);
    ds_tensor_free(x);
    ds_stage_free(s);
    ds_layer_images_free();
    return res;
}

static void check(ds_dtype prec, int checkpoint) {
    step_result plain = run_step(prec, checkpoint, -1.0f);
    step_result drop = run_step(prec, checkpoint, 0.0f);
    const uint64_t residual_copies = 1, grad_bytes = (uint64_t)B * T * C * 4;
    printf("%s checkpoint %d: backward copies %llu (%llu bytes), without Dropouts %llu; "
           "activations' peak in backward %zu bytes (without Dropouts %zu), after it %zu (%zu)\n",
           ds_dtype_name(prec), checkpoint, (unsigned long long)drop.copies.calls,
           (unsigned long long)drop.copies.bytes_read, (unsigned long long)plain.copies.calls,
           drop.act_peak, plain.act_peak, drop.act_after, plain.act_after);
    /* the last Residual's din = dout, an fp32 [B, T, C] gradient (the others run in
     * place); nothing for the Dropouts */
    assert_int_equal(drop.copies.calls, residual_copies);
    assert_int_equal(drop.copies.bytes_read, residual_copies * grad_bytes);
    assert_int_equal(plain.copies.calls, residual_copies);
    /* no boundary gradient buffer of their own */
    assert_int_equal(drop.act_peak, plain.act_peak);
    assert_int_equal(drop.act_after, plain.act_after);
    char what[64];
    snprintf(what, sizeof what, "%s checkpoint %d, Dropouts of p = 0", ds_dtype_name(prec),
             checkpoint);
    eng_same_step(&drop.b, &plain.b, what, "the blocks without Dropouts");
    eng_step_bytes_free(&plain.b);
    eng_step_bytes_free(&drop.b);
}

static void test_fp32(void **state) {
    (void)state;
    check(DS_F32, 0);
    check(DS_F32, 1);
}

static void test_bf16(void **state) {
    (void)state;
    check(DS_BF16, 0);
    check(DS_BF16, 1);
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
