/* The counting kernel table (kernels/kernel_count.h): every entry of ds_kernel_table is
 * wrapped, installing it replaces the device's table and ops and uninstalling gives them
 * back; a GPT stage's step (ln_1, c_attn, attention, c_proj, ln_f, lm_head) gives the same
 * bits counted or not, and counts what its layers imply: one GEMM forward and one
 * backward per Linear, their FLOPs 2 and 4 times the Linear weights times the tokens,
 * the bytes of each Linear's operands, the causal attention's FLOPs summed position by
 * position, two LayerNorms each way. Runs on the device DS_ENGINE_DEVICE names (cpu,
 * sim); counts.lua compares the two devices' counts. */
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
#include "optim.h"

enum { B = 2, T = 8, C = 16, NH = 2, V = 37 };

typedef void (*fn_ptr)(void);

/* a table's entries as pointers, in struct order */
static fn_ptr entry(const ds_kernel_table *k, int i) {
    fn_ptr f;
    memcpy(&f, (const char *)k + (size_t)i * sizeof f, sizeof f);
    return f;
}

static void test_every_entry_wrapped(void **state) {
    (void)state;
    ds_device *d = ds_device_get();
    const ds_kernel_table *real = d->k, *counting = ds_kernel_count_table();
    const ds_device_ops *ops = d->ops;
    assert_int_equal(DS_KCOUNT_NKERNELS * sizeof(fn_ptr), sizeof(ds_kernel_table));
    for (int i = 0; i < DS_KCOUNT_NKERNELS; i++) {
        const char *name = ds_kernel_count_name(i);
        if (!name) fail_msg("kernel table entry %d has no name in kernel_count_table.c", i);
        if (!entry(counting, i)) fail_msg("%s is not wrapped", name);
        if (entry(counting, i) == entry(real, i) || entry(counting, i) == entry(&ds_cpu_kernels, i))
            fail_msg("%s is the device's own entry, not counted", name);
        for (int j = 0; j < i; j++)
            if (!strcmp(name, ds_kernel_count_name(j))) fail_msg("%s named twice", name);
    }
    for (int i = DS_KCOUNT_NKERNELS; i < DS_KCOUNT_N; i++) assert_non_null(ds_kernel_count_name(i));
    assert_null(ds_kernel_count_name(DS_KCOUNT_N));

    ds_err err = {{0}};
    assert_int_equal(ds_kernel_count_install(d, &err), 0);
    assert_ptr_equal(d->k, counting);
    assert_ptr_not_equal(d->ops, ops);
    assert_ptr_equal(d->ops->sync, ops->sync); /* only the ops that move bytes are wrapped */
    assert_int_equal(ds_kernel_count_install(d, &err), -1);
    assert_non_null(strstr(err.msg, "already counting"));
    ds_kernel_count_uninstall();
    assert_ptr_equal(d->k, real);
    assert_ptr_equal(d->ops, ops);
    assert_int_equal(ds_kernel_count_installed(), 0);
    ds_kernel_count_uninstall(); /* none: nothing to do */
    assert_ptr_equal(d->k, real);
}

/* ---- a GPT stage's step ------------------------------------------------------------------ */

static const struct {
    const char *name;
    int in, out, bias;
} LINEARS[] = {{"c_attn", C, 3 * C, 1}, {"c_proj", C, C, 1}, {"lm_head", C, V, 0}};

static ds_stage *gpt_stage(ds_dtype prec) {
    ds_err err = {{0}};
    ds_layer *l[6] = {eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_1"),
                      eng_named(ds_linear_new(C, 3 * C, 1, 0.2f, &err), LINEARS[0].name),
                      ds_attention_new(NH, 0.0f, &err),
                      eng_named(ds_linear_new(C, C, 1, 0.2f, &err), LINEARS[1].name),
                      eng_named(ds_layernorm_new(C, 1e-5f, &err), "ln_f"),
                      eng_named(ds_linear_new(C, V, 0, 0.5f, &err), LINEARS[2].name)};
    assert_non_null(l[2]);
    ds_stage_opts o = {.zero = 0, .checkpoint = 0, .precision = prec};
    ds_stage *s = ds_stage_new("gpt", l, 6, &o, 5, &err);
    if (!s) fail_msg("%s", err.msg);
    return s;
}

typedef struct step_bytes {
    unsigned char *out, *din, *grads;
    size_t out_n, din_n, grads_n;
} step_bytes;

/* One forward and backward of a fresh stage, d(output) a fixed pattern; res (may be NULL)
 * gets its output (before d(output) is written over it), d(input) and parameter
 * gradients. */
static ds_stage *stepped_stage(ds_dtype prec, step_bytes *res) {
    ds_err err = {{0}};
    ds_stage *s = gpt_stage(prec);
    ds_tensor *x = eng_input(B, T, C);
    ds_run r = {.train = 1, .seed = 3};
    if (ds_stage_forward(s, x, &r, &err) != 0) fail_msg("%s", err.msg);
    ds_tensor *out = (ds_tensor *)ds_stage_output(s);
    if (res) res->out = eng_bytes(out), res->out_n = ds_tensor_nbytes(out);
    size_t n = (size_t)out->numel;
    float *dout = malloc(n * sizeof *dout);
    for (size_t i = 0; i < n; i++) dout[i] = (float)((i * 37) % 11) / 16.0f - 0.3f;
    if (ds_tensor_from_host(out, 0, n, dout, &err) != 0) fail_msg("%s", err.msg);
    free(dout);
    if (ds_stage_backward(s, out, &err) != 0) fail_msg("%s", err.msg);
    if (res) {
        res->din = eng_bytes(s->grad_in), res->din_n = ds_tensor_nbytes(s->grad_in);
        res->grads = eng_bytes(s->flat_grads), res->grads_n = ds_tensor_nbytes(s->flat_grads);
    }
    ds_tensor_free(x);
    return s;
}

static step_bytes run_step(ds_dtype prec) {
    step_bytes res;
    ds_stage_free(stepped_stage(prec, &res));
    return res;
}

static void same(const unsigned char *a, size_t na, const unsigned char *b, size_t nb,
                 const char *what) {
    if (na != nb || memcmp(a, b, na)) fail_msg("%s counted is not bit-identical to uncounted", what);
}

/* The FLOPs of causal attention's two products (Q K^T, P V) over the stage's input,
 * position by position: query t of each head meets keys 0..t, hs multiply-adds each. */
static uint64_t causal_attention_flops(void) {
    uint64_t f = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) f += 2 * 2 * (uint64_t)(t + 1) * (C / NH);
    return f;
}

static void check_step(ds_dtype prec) {
    const int half = prec != DS_F32;
    step_bytes plain = run_step(prec);
    ds_err err = {{0}};
    const ds_kernel_table *real = ds_device_get()->k;
    assert_int_equal(ds_kernel_count_install(ds_device_get(), &err), 0);
    step_bytes counted = run_step(prec);
    ds_kernel_count_uninstall();
    assert_ptr_equal(ds_device_get()->k, real);
    same(plain.out, plain.out_n, counted.out, counted.out_n, "the output");
    same(plain.din, plain.din_n, counted.din, counted.din_n, "d(input)");
    same(plain.grads, plain.grads_n, counted.grads, counted.grads_n, "the parameter gradients");

    /* each Linear's operands once: its input (fp32 or 16-bit), weight and bias (16-bit in
     * a 16-bit stage), its output written once */
    uint64_t tokens = B * T, weights = 0, params = 0, acts_in = 0, acts_out = 0;
    for (size_t i = 0; i < sizeof LINEARS / sizeof LINEARS[0]; i++) {
        weights += (uint64_t)LINEARS[i].in * LINEARS[i].out;
        params += (uint64_t)LINEARS[i].in * LINEARS[i].out + (LINEARS[i].bias ? LINEARS[i].out : 0);
        acts_in += tokens * LINEARS[i].in, acts_out += tokens * LINEARS[i].out;
    }
    ds_kcount fwd = eng_kcount(half ? "matmul16_forward" : "matmul_forward");
    ds_kcount bwd = eng_kcount(half ? "matmul16_backward" : "matmul_backward");
    printf("%s: Linear GEMMs forward %llu FLOPs, backward %llu; weights %llu x %llu tokens\n",
           ds_dtype_name(prec), (unsigned long long)fwd.flops, (unsigned long long)bwd.flops,
           (unsigned long long)weights, (unsigned long long)tokens);
    assert_int_equal(fwd.calls, 3);
    assert_int_equal(bwd.calls, 3);
    assert_true(fwd.flops == 2 * weights * tokens);
    assert_true(fwd.flops + bwd.flops == 6 * weights * tokens);
    if (!half) {
        assert_true(fwd.bytes_read == 4 * (acts_in + params));
        assert_true(fwd.bytes_written == 4 * acts_out);
    } else { /* activations 2 or 4 bytes as the stage keeps them */
        assert_true(fwd.bytes_read >= 2 * (acts_in + params) && fwd.bytes_read <= 4 * acts_in + 2 * params);
        assert_true(fwd.bytes_written >= 2 * acts_out && fwd.bytes_written <= 4 * acts_out);
    }
    ds_kcount other = eng_kcount(half ? "matmul_forward" : "matmul16_forward");
    assert_int_equal(other.calls, 0);

    ds_kcount af = eng_kcount(half ? "attention16_forward_fused" : "attention_forward_fused");
    ds_kcount ab = eng_kcount(half ? "attention16_backward_fused" : "attention_backward_fused");
    assert_int_equal(af.calls, 1);
    assert_int_equal(ab.calls, 1);
    /* forward: the two products; backward: the scores again, then four products, and the
     * row term sum(dout * out) over [N, C] */
    assert_true(af.flops == causal_attention_flops());
    assert_true(ab.flops == 5 * causal_attention_flops() / 2 + 2 * tokens * C);
    /* lse: B*NH*T floats written, nothing [T, T] */
    assert_true(af.bytes_written == (half ? 2 : 4) * tokens * C + 4 * (uint64_t)B * NH * T);

    ds_kcount lf = eng_kcount(half ? "layernorm16_forward" : "layernorm_forward");
    ds_kcount lb = eng_kcount(half ? "layernorm16_backward" : "layernorm_backward");
    assert_int_equal(lf.calls, 2);
    assert_int_equal(lb.calls, 2);
    free(plain.out), free(plain.din), free(plain.grads);
    free(counted.out), free(counted.din), free(counted.grads);
    ds_layer_images_free();
}

static void test_step_fp32(void **state) {
    (void)state;
    check_step(DS_F32);
}

static void test_step_bf16(void **state) {
    (void)state;
    check_step(DS_BF16);
}

/* AdamW steps a stage's every parameter, each with its own decay, in one kernel call (one
 * GPU launch, not one per parameter tensor), to the bits of a call per parameter. */
static void check_adamw_one_call(ds_dtype prec) {
    ds_err err = {{0}};
    ds_adamw_cfg c = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                      .weight_decay = 0.1f, .t = 1};
    ds_stage *a = stepped_stage(prec, NULL), *b = stepped_stage(prec, NULL);
    assert_int_equal(ds_kernel_count_install(ds_device_get(), &err), 0);
    if (ds_adamw_step(a, 0, a->numel, &c, &err) != 0) fail_msg("%s", err.msg);
    ds_kcount k = eng_kcount(prec == DS_F32 ? "adamw_spans" : "adamw_half_spans");
    ds_kernel_count_uninstall();
    assert_int_equal(k.calls, 1);
    assert_true(k.flops == 16 * (uint64_t)a->numel);
    /* the reference: b stepped parameter by parameter */
    if (ds_adamw_step(b, 0, 0, &c, &err) != 0) fail_msg("%s", err.msg); /* makes the state */
    for (int i = 0; i < b->nparams; i++) {
        const ds_param *p = b->params[i];
        ds_decay_span one = {0, p->numel, p->decay ? c.weight_decay : 0.0f};
        ds_adamw_spans_of(prec, ds_tensor_at(b->flat_params, p->offset),
                          ds_tensor_at(b->flat_grads, p->offset), 1.0f,
                          b->master ? (float *)b->master->data + p->offset : NULL,
                          (float *)b->adam_m->data + p->offset, (float *)b->adam_v->data + p->offset,
                          &one, 1, &c);
    }
    unsigned char *pa = eng_bytes(a->flat_params), *pb = eng_bytes(b->flat_params);
    same(pa, ds_tensor_nbytes(a->flat_params), pb, ds_tensor_nbytes(b->flat_params),
         "the parameters stepped in one call");
    unsigned char *va = eng_bytes(a->adam_v), *vb = eng_bytes(b->adam_v);
    same(va, ds_tensor_nbytes(a->adam_v), vb, ds_tensor_nbytes(b->adam_v), "the second moments");
    free(pa), free(pb), free(va), free(vb);
    ds_stage_free(a);
    ds_stage_free(b);
    ds_layer_images_free();
}

static void test_adamw_one_call_fp32(void **state) {
    (void)state;
    check_adamw_one_call(DS_F32);
}

static void test_adamw_one_call_bf16(void **state) {
    (void)state;
    check_adamw_one_call(DS_BF16);
}

/* The memory ops: a memset0 and a device copy through the device's ops are counted with
 * their bytes, an allocation with the bytes it zeroes, one not zeroed as a call that
 * moves nothing; reset starts from zero. */
static void test_memory_ops(void **state) {
    (void)state;
    ds_device *d = ds_device_get();
    ds_err err = {{0}};
    assert_int_equal(ds_kernel_count_install(d, &err), 0);
    void *a = d->ops->alloc(d, 1000, &err), *b = d->ops->alloc(d, 1000, &err);
    void *u = d->ops->alloc_uninit(d, 500, &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(u);
    d->ops->memset0(d, a, 1000);
    d->ops->copy(d, b, a, 600);
    char host[100] = {0};
    assert_int_equal(d->ops->from_host(d, a, host, sizeof host, &err), 0);
    assert_int_equal(d->ops->to_host(d, host, b, 40, &err), 0);
    ds_kcount z = eng_kcount("alloc_zero"), m = eng_kcount("memset0"), c = eng_kcount("copy");
    assert_int_equal(z.calls, 2);
    assert_int_equal(z.bytes_written, 2000);
    ds_kcount un = eng_kcount("alloc_uninit");
    assert_int_equal(un.calls, 1);
    assert_int_equal(un.bytes_read + un.bytes_written, 0);
    assert_int_equal(m.calls, 1);
    assert_int_equal(m.bytes_written, 1000);
    assert_int_equal(c.bytes_read, 600);
    assert_int_equal(c.bytes_written, 600);
    assert_int_equal(eng_kcount("from_host").bytes_written, 100);
    assert_int_equal(eng_kcount("to_host").bytes_read, 40);
    ds_kernel_count_reset();
    assert_int_equal(eng_kcount("memset0").calls, 0);
    d->ops->free(d, a, 1000);
    d->ops->free(d, b, 1000);
    d->ops->free(d, u, 500);
    ds_kernel_count_uninstall();
    assert_int_equal(d->ops->sync(d, &err), 0);
}

int main(void) {
    if (eng_open_device() != 0) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_entry_wrapped),
        cmocka_unit_test(test_step_fp32),
        cmocka_unit_test(test_step_bf16),
        cmocka_unit_test(test_adamw_one_call_fp32),
        cmocka_unit_test(test_adamw_one_call_bf16),
        cmocka_unit_test(test_memory_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
