/* ds_config: see ds_config.h. The config is read with the project's strict JSON reader;
 * every value the engine takes is checked by the option table (common/engine_opts.h),
 * so a DeepSpeed config and a job spec are refused with the same words. The values are
 * gathered first (the config's view), then merged into the spec: the spec's explicit
 * options win, "auto" is resolved, and the batch sizes are worked out last, when the
 * micro batch and the accumulation are settled. */
#include "ds_config.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ds_buf.h"
#include "ds_json_read.h"
#include "ds_textfile.h"

#define PATH_LEN 160

typedef struct cfg_ctx {
    ds_jobspec *spec;
    const char *name, *text;
    size_t n;
    int world;
    ds_err *err;
    ds_buf applied, resolved, kept, ignored;
    /* the config's values, by option */
    ds_engine_opts val;
    unsigned char set[DS_EO_COUNT], is_auto[DS_EO_COUNT];
    char path[DS_EO_COUNT][PATH_LEN];
    /* train_batch_size: -1 absent, 0 auto */
    int64_t train_batch;
    char train_batch_path[PATH_LEN];
    /* WarmupCosineLR's ratios, multiplied by the lr once it is settled (-1: none) */
    double warmup_min_ratio, cos_min_ratio;
    int steps_per_print; /* -1: absent */
    double sched_lr;     /* WarmupLR / WarmupDecayLR's warmup_max_lr (-1: none) */
    char sched_lr_path[PATH_LEN];
} cfg_ctx;

/* ---- messages ---- */

static int line_of(const cfg_ctx *c, size_t at) {
    int line = 1;
    for (size_t i = 0; i < at && i < c->n; i++) line += c->text[i] == '\n';
    return line;
}

static int fail(cfg_ctx *c, const ds_jv *v, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(cfg_ctx *c, const ds_jv *v, const char *path, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (v) return ds_err_set(c->err, "%s:%d: %s: %s", c->name, line_of(c, v->at), path, msg);
    return ds_err_set(c->err, "%s: %s: %s", c->name, path, msg);
}

static void ignore(cfg_ctx *c, const char *path, const char *why) {
    ds_buf_printf(&c->ignored, "%s: %s\n", path, why);
}

/* "parent.key" (cut to PATH_LEN - 1 characters). */
static void join(char *out, const char *parent, const char *key) {
    size_t n = strnlen(parent, PATH_LEN - 2);
    memmove(out, parent, n);
    if (n) out[n++] = '.';
    size_t k = strnlen(key, PATH_LEN - 1 - n);
    memcpy(out + n, key, k);
    out[n + k] = '\0';
}

/* ---- values ---- */

static int is_auto(const ds_jv *v) { return v->type == DS_JV_STR && !strcmp(v->str, "auto"); }

/* An integer: a JSON number that is integral (5e8 too). 0, or -1 with the error set. */
static int want_int(cfg_ctx *c, const ds_jv *v, const char *path, int64_t *out) {
    if (v->type != DS_JV_NUM)
        return fail(c, v, path, "expected an integer, got %s", ds_jv_type_name(v->type));
    if (v->num != floor(v->num) || fabs(v->num) >= 9.2e18)
        return fail(c, v, path, "%.17g is not an integer", v->num);
    *out = (int64_t)v->num;
    return 0;
}

static int want_num(cfg_ctx *c, const ds_jv *v, const char *path, double *out) {
    if (v->type != DS_JV_NUM) return fail(c, v, path, "expected a number, got %s", ds_jv_type_name(v->type));
    *out = v->num;
    return 0;
}

static int want_bool(cfg_ctx *c, const ds_jv *v, const char *path, int *out) {
    if (v->type != DS_JV_BOOL)
        return fail(c, v, path, "expected true or false, got %s", ds_jv_type_name(v->type));
    *out = v->boolean;
    return 0;
}

static int want_obj(cfg_ctx *c, const ds_jv *v, const char *path) {
    if (v->type != DS_JV_OBJ) return fail(c, v, path, "expected an object, got %s", ds_jv_type_name(v->type));
    return 0;
}

/* Records the config's value for option opt, checked by the table (an integer option
 * takes only integral values). */
static int put(cfg_ctx *c, int opt, const ds_jv *v, const char *path, double x) {
    const ds_engine_opt *o = &DS_ENGINE_OPTS[opt];
    char why[400];
    if (ds_engine_opt_check_num(o, x, why, sizeof why) != 0) return fail(c, v, path, "%s", why);
    if (o->type == DS_OPT_NUM) *ds_engine_opt_num(o, &c->val) = x;
    else *ds_engine_opt_int(o, &c->val) = (int64_t)x;
    c->set[opt] = 1, c->is_auto[opt] = 0;
    snprintf(c->path[opt], PATH_LEN, "%s", path);
    return 0;
}

static void put_auto(cfg_ctx *c, int opt, const char *path) {
    c->set[opt] = 0, c->is_auto[opt] = 1;
    snprintf(c->path[opt], PATH_LEN, "%s", path);
}

/* v (an integer or "auto") as option opt. */
static int map_int(cfg_ctx *c, int opt, const ds_jv *v, const char *path) {
    if (is_auto(v)) return put_auto(c, opt, path), 0;
    int64_t x = 0;
    return want_int(c, v, path, &x) ? -1 : put(c, opt, v, path, x);
}

static int map_num(cfg_ctx *c, int opt, const ds_jv *v, const char *path) {
    if (is_auto(v)) return put_auto(c, opt, path), 0;
    double x = 0;
    return want_num(c, v, path, &x) ? -1 : put(c, opt, v, path, x);
}

/* ---- sections ---- */

typedef struct reason {
    const char *key, *why;
} reason;

static const char *reason_of(const reason *r, const char *key) {
    for (; r->key; r++)
        if (!strcmp(r->key, key)) return r->why;
    return NULL;
}

static const char NO_SETTING[] = "the engine has no such setting";

static const reason ZERO_IGNORED[] = {
    {"allgather_partitions", "ZeRO-1/2 always all-gather the updated shards"},
    {"allgather_bucket_size", NO_SETTING},
    {"overlap_comm", NO_SETTING},
    {"reduce_scatter", "ZeRO-1/2/3 always reduce-scatter"},
    {"contiguous_gradients", "gradients are always one flat buffer per stage"},
    {"offload_optimizer", "no CPU or NVMe offload"},
    {"offload_param", "no CPU or NVMe offload"},
    {"cpu_offload", "no CPU or NVMe offload"},
    {"stage3_prefetch_bucket_size", "ZeRO-3 prefetches whole stages (ds.Model zero_prefetch)"},
    {"stage3_param_persistence_threshold", "ZeRO-3 shards every parameter"},
    {"stage3_model_persistence_threshold", "ZeRO-3 shards every parameter"},
    {"stage3_max_live_parameters", "ZeRO-3 gathers per stage, not by a parameter count"},
    {"stage3_max_reuse_distance", "ZeRO-3 gathers per stage, not by a parameter count"},
    {"stage3_gather_16bit_weights_on_model_save", "checkpoints save every shard; `dsrun ckpt export` gathers them"},
    {"stage3_gather_fp16_weights_on_model_save", "checkpoints save every shard; `dsrun ckpt export` gathers them"},
    {"sub_group_size", NO_SETTING},
    {"round_robin_gradients", NO_SETTING},
    {"elastic_checkpoint", "checkpoints reshard to any world size by themselves"},
    {"load_from_fp32_weights", "checkpoints always hold fp32 masters"},
    {"ignore_unused_parameters", NO_SETTING},
    {"zero_hpz_partition_size", "no hierarchical partitioning (ZeRO++)"},
    {"zero_quantized_weights", "no quantized communication (ZeRO++)"},
    {"zero_quantized_gradients", "no quantized communication (ZeRO++)"},
    {"mics_shard_size", "no MiCS"},
    {"mics_hierarchical_params_gather", "no MiCS"},
    {NULL, NULL}};

/* An offload section with device "none" asks for nothing: not worth a line. */
static int offload_is_none(const ds_jv *v) {
    const ds_jv *d = ds_jv_get(v, "device");
    return v->type == DS_JV_OBJ && (!d || (d->type == DS_JV_STR && !strcmp(d->str, "none")));
}

static int map_zero(cfg_ctx *c, const ds_jv *z, const char *path) {
    if (want_obj(c, z, path)) return -1;
    for (size_t i = 0; i < z->len; i++) {
        const char *key = z->keys[i];
        const ds_jv *v = &z->items[i];
        char p[PATH_LEN];
        join(p, path, key);
        if (!strcmp(key, "stage")) {
            if (map_int(c, DS_EO_zero, v, p)) return -1;
        } else if (!strcmp(key, "reduce_bucket_size")) {
            if (map_int(c, DS_EO_reduce_bucket_size, v, p)) return -1;
        } else if (!strncmp(key, "offload_", 8) && offload_is_none(v)) {
            continue;
        } else if (reason_of(ZERO_IGNORED, key)) {
            if (is_auto(v)) continue; /* "auto" asks for whatever the engine does */
            ignore(c, p, reason_of(ZERO_IGNORED, key));
        } else {
            ignore(c, p, "not a ZeRO key this mapping knows");
        }
    }
    return 0;
}

static const reason FP16_IGNORED[] = {
    {"consecutive_hysteresis", "the scaler restores its hysteresis on any clean step (DeepSpeed's default false)"},
    {"auto_cast", "no autocast: a stage's precision is its working copy's type"},
    {"fp16_master_weights_and_grads", "16-bit stages keep fp32 master weights"},
    {"loss_scale", "a static loss scale: the engine's scaler is dynamic (from 2^initial_scale_power)"},
    {NULL, NULL}};

/* fp16 and bf16: enabled sets the precision; fp16's scaler keys map one to one. */
static int map_precision(cfg_ctx *c, const ds_jv *s, const char *path, int is_fp16, int *enabled) {
    if (want_obj(c, s, path)) return -1;
    for (size_t i = 0; i < s->len; i++) {
        const char *key = s->keys[i];
        const ds_jv *v = &s->items[i];
        char p[PATH_LEN];
        join(p, path, key);
        if (!strcmp(key, "enabled")) {
            if (is_auto(v)) *enabled = -2;
            else if (want_bool(c, v, p, enabled)) return -1;
            continue;
        }
        if (!is_fp16) {
            ignore(c, p, !strcmp(key, "immediate_grad_update") || !strcmp(key, "check_grad_overflow")
                             ? "bf16 stages keep fp32 masters and need no overflow check"
                             : "not a bf16 key this mapping knows");
            continue;
        }
        static const struct { const char *key; int opt; } MAP[] = {
            {"initial_scale_power", DS_EO_initial_scale_power},
            {"loss_scale_window", DS_EO_loss_scale_window},
            {"hysteresis", DS_EO_hysteresis},
            {"min_loss_scale", DS_EO_min_loss_scale}};
        int done = 0;
        for (size_t k = 0; k < sizeof MAP / sizeof MAP[0] && !done; k++) {
            if (strcmp(key, MAP[k].key)) continue;
            if (map_int(c, MAP[k].opt, v, p)) return -1;
            done = 1;
        }
        if (done) continue;
        if (!strcmp(key, "loss_scale")) { /* 0: dynamic, which is what the engine does */
            double x = 0;
            if (!is_auto(v) && want_num(c, v, p, &x)) return -1;
            if (!is_auto(v) && x != 0) ignore(c, p, reason_of(FP16_IGNORED, key));
        } else if (!strcmp(key, "consecutive_hysteresis")) {
            int b = 0;
            if (want_bool(c, v, p, &b)) return -1;
            if (b) ignore(c, p, reason_of(FP16_IGNORED, key));
        } else {
            ignore(c, p, reason_of(FP16_IGNORED, key) ? reason_of(FP16_IGNORED, key)
                                                      : "not an fp16 key this mapping knows");
        }
    }
    return 0;
}

static int lower_is(const char *s, const char *want) {
    for (; *s && *want; s++, want++)
        if (tolower((unsigned char)*s) != *want) return 0;
    return !*s && !*want;
}

static int map_optimizer_params(cfg_ctx *c, const ds_jv *ps, const char *path) {
    if (want_obj(c, ps, path)) return -1;
    for (size_t i = 0; i < ps->len; i++) {
        const char *key = ps->keys[i];
        const ds_jv *v = &ps->items[i];
        char p[PATH_LEN];
        join(p, path, key);
        int b = 0;
        if (!strcmp(key, "lr")) {
            if (map_num(c, DS_EO_lr, v, p)) return -1;
        } else if (!strcmp(key, "eps")) {
            if (map_num(c, DS_EO_eps, v, p)) return -1;
        } else if (!strcmp(key, "weight_decay")) {
            if (map_num(c, DS_EO_weight_decay, v, p)) return -1;
        } else if (!strcmp(key, "betas")) {
            if (is_auto(v)) {
                put_auto(c, DS_EO_beta1, p), put_auto(c, DS_EO_beta2, p);
                continue;
            }
            if (v->type != DS_JV_ARR || v->len != 2)
                return fail(c, v, p, "expected [beta1, beta2], got %s", ds_jv_type_name(v->type));
            char p1[PATH_LEN], p2[PATH_LEN];
            snprintf(p1, sizeof p1, "%.150s[0]", p), snprintf(p2, sizeof p2, "%.150s[1]", p);
            if (map_num(c, DS_EO_beta1, &v->items[0], p1) || map_num(c, DS_EO_beta2, &v->items[1], p2))
                return -1;
        } else if (!strcmp(key, "adam_w_mode") || !strcmp(key, "amsgrad") || !strcmp(key, "torch_adam") ||
                   !strcmp(key, "bias_correction")) {
            if (want_bool(c, v, p, &b)) return -1;
            if (!strcmp(key, "adam_w_mode") && !b) ignore(c, p, "L2-regularised Adam: the engine's Adam is AdamW");
            if (!strcmp(key, "amsgrad") && b) ignore(c, p, "no AMSGrad");
            if (!strcmp(key, "torch_adam") && b) ignore(c, p, "the engine's AdamW is its own, not torch's");
            if (!strcmp(key, "bias_correction") && !b) ignore(c, p, "AdamW always corrects its bias");
        } else {
            ignore(c, p, "not an Adam parameter this mapping knows");
        }
    }
    return 0;
}

static int map_optimizer(cfg_ctx *c, const ds_jv *o, const char *path) {
    if (want_obj(c, o, path)) return -1;
    const ds_jv *type = ds_jv_get(o, "type"), *params = ds_jv_get(o, "params");
    char p[PATH_LEN];
    join(p, path, "type");
    if (!type) return fail(c, o, p, "missing (DeepSpeed needs it: Adam, AdamW, ...)");
    if (type->type != DS_JV_STR) return fail(c, type, p, "expected a string, got %s", ds_jv_type_name(type->type));
    if (!lower_is(type->str, "adam") && !lower_is(type->str, "adamw")) {
        char why[200];
        snprintf(why, sizeof why, "%.60s: the engine's optimizers are AdamW and SGD (a script's "
                                  "choice); nothing of this section applies", type->str);
        ignore(c, path, why);
        return 0;
    }
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], "type") && strcmp(o->keys[i], "params")) {
            join(p, path, o->keys[i]);
            ignore(c, p, "not an optimizer key this mapping knows");
        }
    join(p, path, "params");
    return params ? map_optimizer_params(c, params, p) : 0;
}

/* A scheduler's parameter as a number (absent: dflt). */
static int sched_num(cfg_ctx *c, const ds_jv *ps, const char *path, const char *key, double dflt,
                     double *out) {
    const ds_jv *v = ds_jv_get(ps, key);
    char p[PATH_LEN];
    join(p, path, key);
    *out = dflt;
    if (!v) return 0;
    if (is_auto(v)) return fail(c, v, p, "\"auto\" is for a trainer that fills it in; give a number");
    return want_num(c, v, p, out);
}

/* Each scheduler's parameters, by kind (1 WarmupLR, 2 WarmupDecayLR, 3 WarmupCosineLR). */
static int sched_param(int kind, const char *key) {
    static const char *const P[4][6] = {
        {NULL},
        {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", NULL},
        {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps", NULL},
        {"total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type", NULL}};
    for (int i = 0; P[kind][i]; i++)
        if (!strcmp(P[kind][i], key)) return 1;
    return 0;
}

/* WarmupLR, WarmupDecayLR and WarmupCosineLR, with DeepSpeed's defaults for what they
 * leave out; DeepSpeed warms up over at least 2 steps. */
static int map_scheduler(cfg_ctx *c, const ds_jv *s, const char *path) {
    if (want_obj(c, s, path)) return -1;
    const ds_jv *type = ds_jv_get(s, "type"), *ps = ds_jv_get(s, "params");
    char p[PATH_LEN], pp[PATH_LEN];
    join(p, path, "type");
    join(pp, path, "params");
    if (!type) return fail(c, s, p, "missing (WarmupLR, WarmupDecayLR, WarmupCosineLR, ...)");
    if (type->type != DS_JV_STR) return fail(c, type, p, "expected a string, got %s", ds_jv_type_name(type->type));
    int kind = !strcmp(type->str, "WarmupLR") ? 1 : !strcmp(type->str, "WarmupDecayLR") ? 2
             : !strcmp(type->str, "WarmupCosineLR") ? 3 : 0;
    if (!kind) {
        char why[200];
        snprintf(why, sizeof why, "%.60s: the engine's schedules are DeepSpeed's WarmupLR, "
                                  "WarmupDecayLR and WarmupCosineLR; nothing of this section applies", type->str);
        ignore(c, path, why);
        return 0;
    }
    static const ds_jv EMPTY = {.type = DS_JV_OBJ};
    if (!ps) ps = &EMPTY;
    if (want_obj(c, ps, pp)) return -1;
    for (size_t i = 0; i < ps->len; i++) {
        if (sched_param(kind, ps->keys[i])) continue;
        char q[PATH_LEN];
        join(q, pp, ps->keys[i]);
        ignore(c, q, !strcmp(ps->keys[i], "last_batch_iteration")
                         ? "a resumed run's schedule follows its step (model:load)"
                         : "not a parameter of this scheduler");
    }
    put(c, DS_EO_lr_schedule, ps, p, kind); /* warmup=1, warmup_decay=2, warmup_cosine=3 */
    const ds_jv *wt = ds_jv_get(ps, "warmup_type");
    char q[PATH_LEN];
    join(q, pp, "warmup_type");
    if (wt && (wt->type != DS_JV_STR || (strcmp(wt->str, "log") && strcmp(wt->str, "linear"))))
        return fail(c, wt, q, "expected \"log\" or \"linear\"");
    if (put(c, DS_EO_warmup_type, wt ? wt : ps, q, wt && !strcmp(wt->str, "linear") ? 0 : 1)) return -1;
    double steps, total, x;
    join(q, pp, "warmup_num_steps");
    if (sched_num(c, ps, pp, "warmup_num_steps", 1000, &steps)) return -1;
    if (steps != floor(steps)) return fail(c, ds_jv_get(ps, "warmup_num_steps"), q, "%g is not an integer", steps);
    if (put(c, DS_EO_warmup_steps, ps, q, steps < 2 ? 2 : (int64_t)steps)) return -1;
    if (kind >= 2) {
        join(q, pp, "total_num_steps");
        const ds_jv *t = ds_jv_get(ps, "total_num_steps");
        if (!t) return fail(c, ps, q, "missing (%s needs it)", type->str);
        if (sched_num(c, ps, pp, "total_num_steps", 0, &total)) return -1;
        if (total != floor(total) || total < 1) return fail(c, t, q, "%g is not an integer >= 1", total);
        if (put(c, DS_EO_total_steps, t, q, (int64_t)total)) return -1;
    }
    if (kind <= 2) {
        join(q, pp, "warmup_min_lr");
        if (sched_num(c, ps, pp, "warmup_min_lr", 0, &x) || put(c, DS_EO_warmup_min_lr, ps, q, x)) return -1;
        /* DeepSpeed's WarmupLR sets the lr itself, over the optimizer's (map_top) */
        join(c->sched_lr_path, pp, "warmup_max_lr");
        return sched_num(c, ps, pp, "warmup_max_lr", 0.001, &c->sched_lr);
    }
    if (sched_num(c, ps, pp, "warmup_min_ratio", 0, &c->warmup_min_ratio) ||
        sched_num(c, ps, pp, "cos_min_ratio", 0.0001, &c->cos_min_ratio))
        return -1;
    if (c->warmup_min_ratio < 0 || c->warmup_min_ratio > 1 || c->cos_min_ratio < 0 || c->cos_min_ratio > 1)
        return fail(c, ps, pp, "warmup_min_ratio and cos_min_ratio must be in 0..1");
    return 0;
}

static const reason TOP_IGNORED[] = {
    {"amp", "no apex AMP: a stage's precision is fp32, bf16 or fp16"},
    {"wall_clock_breakdown", "dslaunch's report has each step's time (docs/monitoring.md)"},
    {"memory_breakdown", "ds.memory_report() and the report's memory (docs/monitoring.md)"},
    {"flops_profiler", "no FLOPs profiler"},
    {"tensorboard", "[monitor] outputs writes TensorBoard events (docs/monitoring.md)"},
    {"csv_monitor", "[monitor] outputs writes metrics.jsonl (docs/monitoring.md)"},
    {"wandb", "no Weights & Biases; [monitor] outputs (docs/monitoring.md)"},
    {"comet", "no Comet; [monitor] outputs (docs/monitoring.md)"},
    {"comms_logger", "no communication logger"},
    {"prescale_gradients", "gradients are averaged once, after the reduction"},
    {"gradient_predivide_factor", "gradients are averaged once, after the reduction"},
    {"sparse_gradients", "no sparse gradients"},
    {"communication_data_type", "gradients are reduced in fp32"},
    {"seq_parallel_communication_data_type", "no sequence parallelism"},
    {"data_types", "gradients are accumulated in fp32"},
    {"fp32_allreduce", "gradients are reduced in fp32 already"},
    {"disable_allgather", NO_SETTING},
    {"zero_allow_untested_optimizer", "ZeRO works with both of the engine's optimizers"},
    {"zero_force_ds_cpu_optimizer", "no CPU optimizer"},
    {"dump_state", NO_SETTING},
    {"elasticity", "no elastic batch sizes; [restart] restarts failed jobs"},
    {"pipeline", "no pipeline parallelism: stages are ZeRO's units, on every rank"},
    {"checkpoint", "checkpoints are model:save / model:load's (docs/zero.md)"},
    {"load_universal_checkpoint", "checkpoints reshard to any world size by themselves"},
    {"use_node_local_storage", NO_SETTING},
    {"data_efficiency", "no curriculum or data routing"},
    {"curriculum_learning", "no curriculum learning"},
    {"compression_training", "no compression"},
    {"quantize_training", "no quantization"},
    {"progressive_layer_drop", "no progressive layer drop"},
    {"eigenvalue", NO_SETTING},
    {"sparse_attention", "no sparse attention"},
    {"aio", "no NVMe offload"},
    {"autotuning", "no autotuning"},
    {"nebula", "no Nebula checkpoints"},
    {"torch_autocast", "no autocast: a stage's precision is its working copy's type"},
    {"graph_harvesting", NO_SETTING},
    {"compile", "no torch.compile: the engine is C"},
    {"hybrid_engine", "no hybrid (RLHF) engine"},
    {"tensor_parallel", "no tensor parallelism"},
    {NULL, NULL}};

static const reason CHECKPOINTING_IGNORED[] = {
    {"partition_activations", "no model parallelism to partition activations over"},
    {"cpu_checkpointing", "checkpointed activations stay on the rank's device"},
    {"contiguous_memory_optimization", "checkpointed activations live in the engine's own buffers"},
    {"number_checkpoints", "the engine checkpoints spans of layers: [engine] checkpointing = every:N"},
    {"synchronize_checkpoint_boundary", "the engine's recomputation needs no synchronisation"},
    {"profile", "no checkpointing profiler"},
    {NULL, NULL}};

/* DeepSpeed's section only configures its checkpoint API: the model decides what to
 * checkpoint. Here a stage does ([engine] checkpointing), so nothing in it maps. */
static int map_checkpointing(cfg_ctx *c, const ds_jv *s, const char *path) {
    if (want_obj(c, s, path)) return -1;
    for (size_t i = 0; i < s->len; i++) {
        char p[PATH_LEN];
        join(p, path, s->keys[i]);
        const char *why = reason_of(CHECKPOINTING_IGNORED, s->keys[i]);
        if (s->items[i].type == DS_JV_BOOL && !s->items[i].boolean) continue; /* off asks nothing */
        ignore(c, p, why ? why : "not a checkpointing key this mapping knows");
    }
    if (s->len == 0) ignore(c, path, "the engine checkpoints per stage: [engine] checkpointing");
    return 0;
}

static int map_top(cfg_ctx *c, const ds_jv *root, int *fp16, int *bf16, const ds_jv **bf16v) {
    for (size_t i = 0; i < root->len; i++) {
        const char *key = root->keys[i];
        const ds_jv *v = &root->items[i];
        char p[PATH_LEN];
        join(p, "", key);
        int rc = 0;
        if (!strcmp(key, "zero_optimization")) rc = map_zero(c, v, p);
        else if (!strcmp(key, "fp16")) rc = map_precision(c, v, p, 1, fp16);
        else if (!strcmp(key, "bf16") || !strcmp(key, "bfloat16")) rc = map_precision(c, v, p, 0, bf16), *bf16v = v;
        else if (!strcmp(key, "train_micro_batch_size_per_gpu")) rc = map_int(c, DS_EO_micro_batch, v, p);
        else if (!strcmp(key, "gradient_accumulation_steps")) rc = map_int(c, DS_EO_grad_accum, v, p);
        else if (!strcmp(key, "gradient_clipping")) rc = map_num(c, DS_EO_gradient_clipping, v, p);
        else if (!strcmp(key, "optimizer")) rc = map_optimizer(c, v, p);
        else if (!strcmp(key, "scheduler")) rc = map_scheduler(c, v, p);
        else if (!strcmp(key, "activation_checkpointing")) rc = map_checkpointing(c, v, p);
        else if (!strcmp(key, "seed")) rc = map_int(c, DS_EO_seed, v, p);
        else if (!strcmp(key, "train_batch_size")) {
            snprintf(c->train_batch_path, PATH_LEN, "%s", p);
            int64_t x = 0;
            if (is_auto(v)) c->train_batch = 0;
            else if ((rc = want_int(c, v, p, &x)) == 0 && x < 1) rc = fail(c, v, p, "%lld: expected an integer >= 1", (long long)x);
            else if (rc == 0) c->train_batch = x;
        } else if (!strcmp(key, "steps_per_print")) {
            int64_t x = 0;
            if (is_auto(v)) continue;
            if ((rc = want_int(c, v, p, &x)) == 0 && (x < 1 || x > 1 << 30))
                rc = fail(c, v, p, "%lld is out of range; expected an integer in 1..%d", (long long)x, 1 << 30);
            else if (rc == 0) c->steps_per_print = (int)x;
        } else if (reason_of(TOP_IGNORED, key)) {
            if (is_auto(v)) continue; /* "auto" asks for whatever the engine does */
            const ds_jv *en = v->type == DS_JV_OBJ ? ds_jv_get(v, "enabled") : NULL;
            if ((en && en->type == DS_JV_BOOL && !en->boolean) || (v->type == DS_JV_BOOL && !v->boolean))
                continue; /* a feature turned off asks for nothing */
            ignore(c, p, reason_of(TOP_IGNORED, key));
        } else {
            ignore(c, p, "unknown: not a DeepSpeed key this mapping knows (DeepSpeed would ignore it silently)");
        }
        if (rc) return -1;
    }
    if (c->sched_lr >= 0) {
        if (c->set[DS_EO_lr] && c->val.lr != c->sched_lr)
            ignore(c, c->path[DS_EO_lr], "the scheduler's warmup_max_lr sets the lr, as in DeepSpeed");
        return put(c, DS_EO_lr, ds_jv_get(root, "scheduler"), c->sched_lr_path, c->sched_lr);
    }
    return 0;
}

/* ---- merging into the spec ---- */

static void fmt_opt(int opt, const ds_engine_opts *v, char *buf, size_t len) {
    ds_engine_opt_format(&DS_ENGINE_OPTS[opt], v, buf, len);
}

static int same(int opt, const ds_engine_opts *a, const ds_engine_opts *b) {
    const ds_engine_opt *o = &DS_ENGINE_OPTS[opt];
    if (o->type == DS_OPT_NUM)
        return *ds_engine_opt_num(o, (ds_engine_opts *)a) == *ds_engine_opt_num(o, (ds_engine_opts *)b);
    return *ds_engine_opt_int(o, (ds_engine_opts *)a) == *ds_engine_opt_int(o, (ds_engine_opts *)b);
}

static void copy_opt(int opt, ds_engine_opts *dst, const ds_engine_opts *src) {
    const ds_engine_opt *o = &DS_ENGINE_OPTS[opt];
    if (o->type == DS_OPT_NUM) *ds_engine_opt_num(o, dst) = *ds_engine_opt_num(o, (ds_engine_opts *)src);
    else *ds_engine_opt_int(o, dst) = *ds_engine_opt_int(o, (ds_engine_opts *)src);
}

/* The config's value of opt into the spec unless the spec gave its own; "auto" says
 * what it became. */
static void merge_opt(cfg_ctx *c, int opt) {
    ds_jobspec *s = c->spec;
    const char *key = DS_ENGINE_OPTS[opt].key;
    char mine[64], theirs[64];
    fmt_opt(opt, &s->engine, mine, sizeof mine);
    if (c->is_auto[opt]) {
        ds_buf_printf(&c->resolved, "%s = auto -> %s = %s (%s)\n", c->path[opt], key, mine,
                      s->engine_given[opt] ? "the job's [engine] or --set" : "the engine's default");
        return;
    }
    if (!c->set[opt]) return;
    fmt_opt(opt, &c->val, theirs, sizeof theirs);
    if (s->engine_given[opt]) {
        if (!same(opt, &s->engine, &c->val))
            ds_buf_printf(&c->kept, "%s -> %s = %s: the job's %s = %s kept\n", c->path[opt], key, theirs,
                          key, mine);
        return;
    }
    copy_opt(opt, &s->engine, &c->val);
    s->engine_given[opt] = 1;
    ds_buf_printf(&c->applied, "%s -> %s = %s\n", c->path[opt], key, theirs);
}

/* fp16 and bf16 enabled: 1 true, 0 false, -1 absent, -2 "auto". Enabled sets the
 * precision; a false with nothing enabled says fp32. */
static int merge_precision(cfg_ctx *c, int fp16, int bf16, const ds_jv *bf16v) {
    if (fp16 == 1 && bf16 == 1)
        return fail(c, bf16v, "bf16.enabled", "fp16 and bf16 are both enabled; enable one");
    if (fp16 == 1) put(c, DS_EO_precision, NULL, "fp16.enabled", 2);
    else if (bf16 == 1) put(c, DS_EO_precision, NULL, "bf16.enabled", 1);
    else if (fp16 == -2 || bf16 == -2) put_auto(c, DS_EO_precision, fp16 == -2 ? "fp16.enabled" : "bf16.enabled");
    else if (fp16 == 0 || bf16 == 0) put(c, DS_EO_precision, NULL, fp16 == 0 ? "fp16.enabled" : "bf16.enabled", 0);
    merge_opt(c, DS_EO_precision);
    return 0;
}

static int batch_rule(cfg_ctx *c, int64_t tbs, int mb_known, int ga_known, int64_t *mb, int64_t *ga);

/* DeepSpeed's rule: train_batch_size = micro batch x accumulation x world size; any two
 * give the third, and all three must agree. */
static int merge_batch(cfg_ctx *c) {
    ds_jobspec *s = c->spec;
    int64_t tbs = c->train_batch;
    int mb_known = s->engine_given[DS_EO_micro_batch] || c->set[DS_EO_micro_batch];
    int ga_known = s->engine_given[DS_EO_grad_accum] || c->set[DS_EO_grad_accum];
    unsigned char mb_auto = c->is_auto[DS_EO_micro_batch], ga_auto = c->is_auto[DS_EO_grad_accum];
    c->is_auto[DS_EO_micro_batch] = c->is_auto[DS_EO_grad_accum] = 0; /* said below, once settled */
    merge_opt(c, DS_EO_micro_batch);
    merge_opt(c, DS_EO_grad_accum);
    int64_t *mb = &s->engine.micro_batch, *ga = &s->engine.grad_accum;
    int rc = batch_rule(c, tbs, mb_known, ga_known, mb, ga);
    if (rc == 0 && mb_auto)
        ds_buf_printf(&c->resolved, "%s = auto -> micro_batch = %lld\n", c->path[DS_EO_micro_batch], (long long)*mb);
    if (rc == 0 && ga_auto)
        ds_buf_printf(&c->resolved, "%s = auto -> grad_accum = %lld\n", c->path[DS_EO_grad_accum], (long long)*ga);
    return rc;
}

static int batch_rule(cfg_ctx *c, int64_t tbs, int mb_known, int ga_known, int64_t *mb, int64_t *ga) {
    ds_jobspec *s = c->spec;
    int64_t w = c->world;
    const char *tp = c->train_batch_path;
    if (tbs <= 0) {
        if (tbs == 0)
            ds_buf_printf(&c->resolved, "%s = auto -> %lld (micro_batch %lld x grad_accum %lld x %lld ranks)\n",
                          tp, (long long)(*mb * *ga * w), (long long)*mb, (long long)*ga, (long long)w);
        return 0;
    }
    if (mb_known && ga_known) {
        if (*mb * *ga * w != tbs)
            return fail(c, NULL, tp, "%lld is not train_micro_batch_size_per_gpu %lld x "
                        "gradient_accumulation_steps %lld x world size %lld = %lld (DeepSpeed's rule)",
                        (long long)tbs, (long long)*mb, (long long)*ga, (long long)w, (long long)(*mb * *ga * w));
        return 0;
    }
    int derive_ga = mb_known;
    if (!mb_known && !ga_known) *ga = 1; /* train_batch_size alone: no accumulation */
    int64_t per = derive_ga ? *mb * w : *ga * w;
    if (tbs % per != 0 || tbs / per < 1)
        return fail(c, NULL, tp, "%lld is not a multiple of %s %lld x world size %lld", (long long)tbs,
                    derive_ga ? "train_micro_batch_size_per_gpu" : "gradient_accumulation_steps",
                    (long long)(derive_ga ? *mb : *ga), (long long)w);
    int opt = derive_ga ? DS_EO_grad_accum : DS_EO_micro_batch;
    char why[400];
    if (ds_engine_opt_check_int(&DS_ENGINE_OPTS[opt], tbs / per, why, sizeof why) != 0)
        return fail(c, NULL, tp, "makes %s %lld: %s", DS_ENGINE_OPTS[opt].key, (long long)(tbs / per), why);
    *(derive_ga ? ga : mb) = tbs / per;
    s->engine_given[DS_EO_micro_batch] = s->engine_given[DS_EO_grad_accum] = 1;
    ds_buf_printf(&c->applied, "%s = %lld -> micro_batch = %lld, grad_accum = %lld (x %lld ranks)\n", tp,
                  (long long)tbs, (long long)*mb, (long long)*ga, (long long)w);
    return 0;
}

/* WarmupCosineLR's ratios are of the lr, known once the lr is merged. */
static void merge_cosine_ratios(cfg_ctx *c) {
    if (c->warmup_min_ratio < 0) return;
    double lr = c->spec->engine.lr;
    put(c, DS_EO_warmup_min_lr, NULL, "scheduler.params.warmup_min_ratio x lr", c->warmup_min_ratio * lr);
    put(c, DS_EO_min_lr, NULL, "scheduler.params.cos_min_ratio x lr", c->cos_min_ratio * lr);
    merge_opt(c, DS_EO_warmup_min_lr);
    merge_opt(c, DS_EO_min_lr);
}

static int merge(cfg_ctx *c, int fp16, int bf16, const ds_jv *bf16v) {
    if (merge_precision(c, fp16, bf16, bf16v)) return -1;
    for (int i = 0; i < DS_EO_COUNT; i++) {
        if (i == DS_EO_precision || i == DS_EO_micro_batch || i == DS_EO_grad_accum ||
            i == DS_EO_warmup_min_lr || i == DS_EO_min_lr)
            continue;
        merge_opt(c, i);
    }
    if (c->warmup_min_ratio < 0) {
        merge_opt(c, DS_EO_warmup_min_lr);
        merge_opt(c, DS_EO_min_lr);
    }
    merge_cosine_ratios(c);
    if (merge_batch(c)) return -1;
    if (c->steps_per_print > 0) {
        if (c->spec->steps_per_print_given && c->spec->steps_per_print != c->steps_per_print)
            ds_buf_printf(&c->kept, "steps_per_print -> %d: the job's [monitor] steps_per_print = %d kept\n",
                          c->steps_per_print, c->spec->steps_per_print);
        else if (!c->spec->steps_per_print_given) {
            c->spec->steps_per_print = c->steps_per_print;
            ds_buf_printf(&c->applied, "steps_per_print -> [monitor] steps_per_print = %d\n", c->steps_per_print);
        }
    }
    const ds_engine_opt *a, *b;
    char why[400];
    if (ds_engine_opts_check(&c->spec->engine, &a, &b, why, sizeof why) != 0)
        return ds_err_set(c->err, "%s: %s", c->name, why);
    if (c->spec->engine.lr_schedule >= 2 && c->spec->engine.total_steps < c->spec->engine.warmup_steps)
        return ds_err_set(c->err, "%s: scheduler.params.total_num_steps (%lld) is below warmup_num_steps (%lld)",
                          c->name, (long long)c->spec->engine.total_steps, (long long)c->spec->engine.warmup_steps);
    return 0;
}

static char *take(ds_buf *b) {
    char *s = strdup(b->len ? ds_buf_str(b) : "");
    ds_buf_free(b);
    return s;
}

int ds_dsconfig_apply_text(ds_jobspec *spec, const char *name, const char *text, size_t n,
                           int world_size, ds_dsconfig_notes *notes, ds_err *err) {
    memset(notes, 0, sizeof *notes);
    cfg_ctx c = {.spec = spec, .name = name, .text = text, .n = n, .world = world_size, .err = err,
                 .train_batch = -1, .warmup_min_ratio = -1, .cos_min_ratio = -1, .steps_per_print = -1,
                 .sched_lr = -1};
    ds_engine_opts_init(&c.val);
    ds_err perr = {""};
    ds_jv *root = ds_jv_parse(text, n, &perr);
    if (!root) return ds_err_set(err, "%s: not JSON: %s", name, perr.msg);
    int fp16 = -1, bf16 = -1;
    const ds_jv *bf16v = NULL;
    int rc = root->type != DS_JV_OBJ ? fail(&c, root, "(top)", "expected an object, got %s", ds_jv_type_name(root->type))
             : map_top(&c, root, &fp16, &bf16, &bf16v) ? -1
             : merge(&c, fp16, bf16, bf16v);
    ds_jv_free(root);
    notes->applied = take(&c.applied);
    notes->resolved = take(&c.resolved);
    notes->kept = take(&c.kept);
    notes->ignored = take(&c.ignored);
    if (!notes->applied || !notes->resolved || !notes->kept || !notes->ignored) {
        ds_dsconfig_notes_free(notes);
        return ds_err_set(err, "%s: out of memory", name);
    }
    return rc;
}

int ds_dsconfig_apply(ds_jobspec *spec, int world_size, ds_dsconfig_notes *notes, ds_err *err) {
    memset(notes, 0, sizeof *notes);
    if (!spec->deepspeed_config) return 0;
    char *text = ds_textfile_read(spec->deepspeed_config, "the DeepSpeed config", 16u << 20, err);
    if (!text) return -1;
    int rc = ds_dsconfig_apply_text(spec, spec->deepspeed_config, text, strlen(text), world_size, notes, err);
    free(text);
    return rc;
}

static void print_lines(FILE *out, const char *head, const char *lines) {
    if (!lines || !*lines) return;
    fprintf(out, "%s\n", head);
    for (const char *l = lines; *l; l += strcspn(l, "\n") + 1) fprintf(out, "  %.*s\n", (int)strcspn(l, "\n"), l);
}

void ds_dsconfig_print(const ds_dsconfig_notes *notes, const char *name, FILE *out) {
    char head[600];
    snprintf(head, sizeof head, "dslaunch: %s: applied to [engine]:", name);
    print_lines(out, head, notes->applied);
    snprintf(head, sizeof head, "dslaunch: %s: \"auto\" resolved:", name);
    print_lines(out, head, notes->resolved);
    snprintf(head, sizeof head, "dslaunch: %s: kept from the job spec or --set (they win over the config):", name);
    print_lines(out, head, notes->kept);
    int n = 0;
    for (const char *l = notes->ignored ? notes->ignored : ""; *l; l += strcspn(l, "\n") + 1) n++;
    snprintf(head, sizeof head, "dslaunch: warning: %s: %d key%s not applied:", name, n, n == 1 ? "" : "s");
    print_lines(out, head, notes->ignored);
}

void ds_dsconfig_notes_free(ds_dsconfig_notes *notes) {
    free(notes->applied);
    free(notes->resolved);
    free(notes->kept);
    free(notes->ignored);
    memset(notes, 0, sizeof *notes);
}

int ds_dsconfig_use(ds_jobspec *spec, int world_size, FILE *out, ds_err *err) {
    ds_dsconfig_notes notes;
    if (ds_dsconfig_apply(spec, world_size, &notes, err) != 0) {
        ds_dsconfig_notes_free(&notes);
        return -1;
    }
    if (spec->deepspeed_config) {
        ds_dsconfig_print(&notes, spec->deepspeed_config, out);
        if (!ds_jobspec_is_lua(spec))
            fprintf(out, "dslaunch: note: %s sets the engine's options (DS_ENGINE_*), which only a Lua "
                         "script's ds library reads; %s reads its own config\n", spec->deepspeed_config, spec->script);
    }
    ds_dsconfig_notes_free(&notes);
    return 0;
}
