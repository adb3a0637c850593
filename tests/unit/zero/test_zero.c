/* ZeRO's collective bookkeeping on one small stage (Linear 5 -> 3: a 32-element flat
 * buffer, weight 15 + 1 alignment, bias 3 + 13) over 1, 2 and 3 real processes (Gloo on
 * loopback), each ZeRO stage: shards cut through the weight, 3 ranks pad the buffer to
 * 33. Every rank writes its own gradients; after the hooks, the reduction, clipping and
 * two AdamW steps the parameters must equal one rank's plain AdamW on the averaged
 * gradients (starting from rank 0's parameters, which ZeRO broadcasts), and each rank
 * must hold only the state its stage keeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>

#include "../comm/comm_test_util.h"
#include "zero.h"

static ds_stage *linear_stage(int zero, ds_err *err) {
    ds_layer *l = ds_linear_new(5, 3, 1, 0.5f, err);
    if (!l) return NULL;
    ds_stage_opts o = {.zero = zero, .checkpoint = 0, .precision = DS_F32};
    return ds_stage_new("lin", &l, 1, &o, 42, err);
}

/* Rank r's gradient for flat element i (real elements only). */
static float grad_of(int r, size_t i) { return 0.01f * (float)(r + 1) * (float)(i + 1) * (i % 2 ? -1 : 1); }

static int zero_rank_main(const ds_context *ctx, int zero) {
    ds_err err = {{0}};
    ds_comm_opts co = {.timeout_ms = 30000};
    ds_comm *c = ds_comm_open_opts(ctx, &co, &err);
    RANK_CHECK(c != NULL, "open: %s", err.msg);
    int rank = ctx->rank, world = ctx->world_size;
    ds_stage *s = linear_stage(zero, &err), *ref = linear_stage(0, &err);
    RANK_CHECK(s && ref, "%s", err.msg);
    if (rank == 1) s->params[0]->data[3] += 1.0f; /* rank 0's values must win */
    ds_zero *z = ds_zero_new(c, &s, 1, 4, &err); /* 4-element buckets: many pieces */
    RANK_CHECK(z != NULL, "%s", err.msg);
    ds_zero_stage *zs = &z->st[0];
    int64_t shard = (32 + world - 1) / world;
    RANK_CHECK(zs->part.shard == shard && zs->lo == rank * shard, "partition");
    /* What each stage keeps outside any window. */
    RANK_CHECK((zero == 3) == (s->flat_params->data == NULL), "params window");
    RANK_CHECK((zero >= 2) == (s->flat_grads->data == NULL), "grads window");
    if (zero == 3) RANK_CHECK(zs->param_shard->numel == shard, "param shard");
    if (zero >= 2) RANK_CHECK(zs->grad_shard->numel == shard, "grad shard");

    ds_adamw_cfg cfg = {0.01f, 0.9f, 0.95f, 1e-8f, 0.1f, 0};
    for (int step = 1; step <= 2; step++) {
        RANK_CHECK(ds_zero_zero_grad(z, &err) == 0, "%s", err.msg);
        ds_stage_zero_grad(ref);
        RANK_CHECK(ds_zero_before_forward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(s->params[0]->data != NULL, "forward without parameters");
        RANK_CHECK(ds_zero_after_forward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_zero_before_backward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(s->params[0]->grad != NULL, "backward without a gradient buffer");
        for (int k = 0; k < s->nparams; k++) {
            ds_param *p = s->params[k];
            for (size_t j = 0; j < p->numel; j++) {
                p->grad[j] += step * grad_of(rank, p->offset + j);
                float sum = 0; /* what the average is, on one rank */
                for (int r = 0; r < world; r++) sum += step * grad_of(r, p->offset + j);
                ref->params[k]->grad[j] = sum / (float)world;
            }
        }
        RANK_CHECK(ds_zero_after_backward(z, 0, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_zero_reduce(z, &err) == 0, "%s", err.msg);
        double ss = 0, want = ds_stage_grad_sumsq(ref, 0, ref->numel);
        RANK_CHECK(ds_zero_grad_sumsq(z, &ss, &err) == 0, "%s", err.msg);
        RANK_CHECK(fabs(ss - want) <= 1e-6 * want, "sumsq %.9g, want %.9g", ss, want);
        RANK_CHECK(ds_zero_scale_grads(z, 0.5f, &err) == 0, "%s", err.msg);
        ds_stage_scale_grads(ref, 0.5f);
        cfg.t = step;
        RANK_CHECK(ds_zero_adamw(z, &cfg, 1.0f, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_adamw_step(ref, 0, ref->numel, &cfg, &err) == 0, "%s", err.msg);
    }
    double mean = 0;
    RANK_CHECK(ds_zero_mean(z, rank + 1.0, &mean, &err) == 0 && mean == (world + 1) / 2.0,
               "mean %g", mean);
    RANK_CHECK(ds_zero_gather_params(z, 0, &err) == 0, "%s", err.msg);
    const float *w = s->flat_params->data, *wr = ref->flat_params->data;
    for (size_t i = 0; i < ref->numel; i++)
        RANK_CHECK(fabsf(w[i] - wr[i]) <= 1e-6f * fabsf(wr[i]) + 1e-7f,
                   "zero %d rank %d param %zu: %.9g, want %.9g", zero, rank, i, w[i], wr[i]);
    ds_zero_release_params(z, 0);
    if (zero >= 1) RANK_CHECK(zs->m->numel == shard && !s->adam_m, "sharded moments");
    else RANK_CHECK(s->adam_m && s->adam_m->numel == 32, "full moments");
    ds_zero_free(z);
    ds_stage_free(s);
    ds_stage_free(ref);
    ds_comm_close(c);
    return 0;
}

static int zero_rank(rank_env *env) { return zero_rank_main(&env->ctx, *(int *)env->arg); }

static void run_world(int world) {
    for (int zero = 0; zero <= 3; zero++) {
        int failed = run_ranks(world, world, 30000, 60, zero_rank, &zero);
        if (failed) fail_msg("world %d, zero %d: %d ranks failed", world, zero, failed);
    }
}

static void test_world1(void **state) { (void)state; run_world(1); }
static void test_world2(void **state) { (void)state; run_world(2); }
static void test_world3(void **state) { (void)state; run_world(3); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world1),
        cmocka_unit_test(test_world2),
        cmocka_unit_test(test_world3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
