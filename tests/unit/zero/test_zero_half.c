/* ZeRO on a 16-bit stage (Linear 5 -> 3, 32-element flat buffer) over 1, 2 and 4 real
 * processes (Gloo on loopback), each ZeRO stage, bf16 and fp16. Gradients chosen exact in
 * 16 bits must reduce to the exact average; after two AdamW steps (with a gradient scale
 * of 0.5) every rank's fp32 masters must equal one rank's fp32 AdamW bit for bit and the
 * working copy must be them rounded; the masters exist only as the rank's shard at
 * ZeRO >= 1; and an overflowed gradient on the last rank must make every rank's global
 * norm non-finite (the step is skipped everywhere). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "../comm/comm_test_util.h"
#include "zero.h"

static ds_stage *linear_stage(int zero, ds_dtype dt, ds_err *err) {
    ds_layer *l = ds_linear_new(5, 3, 1, 0.5f, err);
    if (!l) return NULL;
    ds_stage_opts o = {.zero = zero, .checkpoint = 0, .precision = dt};
    return ds_stage_new("lin", &l, 1, &o, 42, err);
}

/* Rank r's gradient for flat element i: multiples of 1/64 with at most 8 significant
 * bits, so the ranks' sum and its average over 1, 2 or 4 ranks are exact in bf16 and
 * fp16 alike: the 16-bit reduction must then give the exact fp32 average. */
static float grad_of(int r, size_t i) { return (float)((r + 1) * (int)(i + 1) * (i % 2 ? -1 : 1)) / 64.0f; }

static float widen1(ds_dtype dt, uint16_t h) {
    float f;
    ds_half_to_f32(ds_half_of(dt), &f, &h, 1);
    return f;
}

static int zero_half_rank_main(const ds_context *ctx, int zero, ds_dtype dt) {
    ds_err err = {{0}};
    ds_comm_opts co = {.timeout_ms = 30000};
    ds_comm *c = ds_comm_open_opts(ctx, &co, &err);
    RANK_CHECK(c != NULL, "open: %s", err.msg);
    int rank = ctx->rank, world = ctx->world_size;
    ds_half h = ds_half_of(dt);
    ds_stage *s = linear_stage(zero, dt, &err), *ref = linear_stage(0, DS_F32, &err);
    RANK_CHECK(s && ref, "%s", err.msg);
    RANK_CHECK(s->flat_params->dtype == dt && s->flat_grads->dtype == dt, "16-bit buffers");
    /* The reference starts from the working copy as fp32: what the masters are made from. */
    ds_half_to_f32(h, ref->flat_params->data, s->flat_params->data, s->numel);
    ds_zero *z = ds_zero_new(c, &s, 1, 4, &err);
    RANK_CHECK(z != NULL, "%s", err.msg);
    ds_zero_stage *zs = &z->st[0];
    int64_t shard = (32 + world - 1) / world;
    if (zero == 3) RANK_CHECK(ds_tensor_nbytes(zs->param_shard) == (size_t)shard * 2, "param shard bytes");
    if (zero >= 2) RANK_CHECK(ds_tensor_nbytes(zs->grad_shard) == (size_t)shard * 2, "grad shard bytes");

    ds_adamw_cfg cfg = {0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
    for (int step = 1; step <= 3; step++) {
        RANK_CHECK(ds_zero_zero_grad(z, &err) == 0, "%s", err.msg);
        ds_stage_zero_grad(ref);
        RANK_CHECK(ds_zero_before_forward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_zero_after_forward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_zero_before_backward(z, 0, &err) == 0, "%s", err.msg);
        for (int k = 0; k < s->nparams; k++) {
            ds_param *p = s->params[k];
            RANK_CHECK(p->half_grad != NULL && p->grad == NULL, "16-bit gradient slice");
            for (size_t j = 0; j < p->numel; j++) {
                float g = (float)step * grad_of(rank, p->offset + j), sum = 0;
                ds_half_from_f32(h, p->half_grad + j, &g, 1);
                for (int r = 0; r < world; r++) sum += (float)step * grad_of(r, p->offset + j);
                ((float *)ref->flat_grads->data)[p->offset + j] = sum / (float)world;
            }
        }
        /* Step 3: one rank's gradient overflows; every rank must see it. */
        if (step == 3 && rank == world - 1) s->params[0]->half_grad[2] = dt == DS_BF16 ? 0x7f80 : 0x7c00;
        RANK_CHECK(ds_zero_after_backward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_zero_reduce(z, &err) == 0, "%s", err.msg);
        double ss = 0, want = ds_stage_grad_sumsq(ref, 0, ref->numel);
        RANK_CHECK(ds_zero_grad_sumsq(z, &ss, &err) == 0, "%s", err.msg);
        if (step == 3) {
            RANK_CHECK(!isfinite(ss), "rank %d: an overflow on rank %d gave a finite norm %g",
                       rank, world - 1, ss);
            break; /* the step is skipped */
        }
        RANK_CHECK(ss == want, "sumsq %.17g, want %.17g (exact)", ss, want);
        cfg.t = step;
        RANK_CHECK(ds_zero_adamw(z, &cfg, 0.5f, &err) == 0, "%s", err.msg);
        ds_stage_scale_grads(ref, 0.5f);
        RANK_CHECK(ds_adamw_step(ref, 0, ref->numel, &cfg, &err) == 0, "%s", err.msg);
    }
    /* The masters took exactly the fp32 steps; the working copy is them rounded. */
    const float *wr = ref->flat_params->data;
    const float *master = zero == 0 ? s->master->data : zs->master->data;
    int64_t m0 = zero == 0 ? 0 : zs->lo;
    for (int64_t i = zs->lo; i < zs->hi; i++)
        RANK_CHECK(master[i - m0] == wr[i], "zero %d rank %d master %lld: %.9g, want %.9g", zero,
                   rank, (long long)i, master[i - m0], wr[i]);
    RANK_CHECK(zero == 0 ? s->master->numel == 32 : zs->master->numel == shard && !s->master,
               "masters: full at ZeRO 0, the shard above");
    RANK_CHECK(ds_zero_gather_params(z, 0, &err) == 0, "%s", err.msg);
    const uint16_t *w = s->flat_params->data;
    for (size_t i = 0; i < ref->numel; i++) {
        uint16_t want;
        ds_half_from_f32(h, &want, wr + i, 1);
        RANK_CHECK(w[i] == want, "zero %d rank %d working copy %zu: %g, want %g", zero, rank, i,
                   widen1(dt, w[i]), widen1(dt, want));
    }
    ds_zero_release_params(z, 0);
    ds_zero_free(z);
    ds_stage_free(s);
    ds_stage_free(ref);
    ds_comm_close(c);
    return 0;
}

typedef struct half_case {
    int zero;
    ds_dtype dt;
} half_case;

static int half_rank(rank_env *env) {
    const half_case *hc = env->arg;
    return zero_half_rank_main(&env->ctx, hc->zero, hc->dt);
}

static void run_world(int world, ds_dtype dt) {
    for (int zero = 0; zero <= 3; zero++) {
        half_case hc = {zero, dt};
        int failed = run_ranks(world, world, 30000, 60, half_rank, &hc);
        if (failed) fail_msg("%s world %d, zero %d: %d ranks failed", ds_dtype_name(dt),
                             world, zero, failed);
    }
}

static void test_bf16_world1(void **state) { (void)state; run_world(1, DS_BF16); }
static void test_bf16_world2(void **state) { (void)state; run_world(2, DS_BF16); }
static void test_bf16_world4(void **state) { (void)state; run_world(4, DS_BF16); }
static void test_fp16_world1(void **state) { (void)state; run_world(1, DS_F16); }
static void test_fp16_world2(void **state) { (void)state; run_world(2, DS_F16); }
static void test_fp16_world4(void **state) { (void)state; run_world(4, DS_F16); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_world1), cmocka_unit_test(test_bf16_world2),
        cmocka_unit_test(test_bf16_world4), cmocka_unit_test(test_fp16_world1),
        cmocka_unit_test(test_fp16_world2), cmocka_unit_test(test_fp16_world4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
