/* The engine's options, in one table: each option's name (the same in Lua, in C and, as
 * DS_ENGINE_<NAME>, in a rank's environment), its job-spec key under [engine], its type,
 * range and default, and where it acts. The job-spec parser, the plan, the worker's
 * environment, the Lua stage and model options and the docs all read this table; an
 * option added here is known to all of them, and only its effect remains to be written.
 *
 * X(name, key, type, lo, hi, choices, default, scope, doc):
 *   name     the C field of ds_engine_opts, the Lua option, DS_ENGINE_<NAME>
 *   key      its [engine] key in a job spec (DeepSpeed's name where DeepSpeed has one)
 *   type     INT (integer), ENUM (one of choices, stored as its index), CKPT (none | full
 *            | every:N, stored as 0 | 1 | N: checkpointed spans of N layers), NUM (a real
 *            number), BYTES (an integer with an optional KiB/MiB/GiB/TiB or KB/MB/GB/TB
 *            suffix)
 *   lo, hi   the range (INT, CKPT's N, NUM, BYTES)
 *   choices  ENUM: "a|b|c"
 *   default  as a job spec would write it
 *   scope    STAGE: a per-stage option (ds.Stage{...}) the job sets the default of;
 *            it may also be `auto` (stored as DS_ENGINE_AUTO): the memory planner
 *            chooses it per stage at the first train_step (docs/memory.md);
 *            MODEL: an option of ds.Model{...}; JOB: read by the training loop
 *   doc      one line for --help, errors and docs */
#ifndef DS_ENGINE_OPTS_H
#define DS_ENGINE_OPTS_H

#include <stddef.h>
#include <stdint.h>

#define DS_ENGINE_OPTIONS(X)                                                                        \
    X(zero, "zero_stage", INT, 0, 3, NULL, "0", STAGE,                                              \
      "ZeRO stage: 0 nothing sharded, 1 optimizer state, 2 and gradients, 3 and parameters")       \
    X(precision, "precision", ENUM, 0, 0, "fp32|bf16|fp16", "fp32", STAGE,                          \
      "the working copy's type (16-bit stages keep fp32 master weights)")                          \
    X(checkpoint, "checkpointing", CKPT, 1, 1000000, NULL, "none", STAGE,                           \
      "activation checkpointing: none, full (every layer) or every:N layers")                      \
    X(micro_batch, "micro_batch", INT, 1, 1 << 20, NULL, "1", JOB,                                  \
      "rows per rank per micro-batch")                                                             \
    X(grad_accum, "grad_accum", INT, 1, 1 << 20, NULL, "1", JOB,                                    \
      "micro-batches accumulated per optimizer step")                                              \
    X(seed, "seed", INT, 0, INT64_MAX, NULL, "1234", JOB,                                           \
      "initialisation and dropout seed")                                                           \
    X(initial_scale_power, "initial_scale_power", INT, 0, 62, NULL, "16", MODEL,                    \
      "fp16 loss scaler: the first scale is 2^power")                                              \
    X(loss_scale_window, "loss_scale_window", INT, 1, 1 << 30, NULL, "1000", MODEL,                 \
      "fp16 loss scaler: clean steps before the scale doubles")                                    \
    X(hysteresis, "hysteresis", INT, 1, 1 << 20, NULL, "2", MODEL,                                  \
      "fp16 loss scaler: overflows tolerated before the scale halves")                             \
    X(min_loss_scale, "min_loss_scale", INT, 1, 1 << 30, NULL, "1", MODEL,                          \
      "fp16 loss scaler: the smallest scale")                                                      \
    X(reduce_bucket_size, "reduce_bucket_size", INT, 1, 1 << 30, NULL, "1048576", MODEL,            \
      "ZeRO-2/3 gradient bucket, elements")                                                        \
    X(gradient_clipping, "gradient_clipping", NUM, 0, 1e12, NULL, "0", JOB,                         \
      "clip the global gradient norm to this when the script gives no clip (0: none)")           \
    X(device, "device", ENUM, 0, 0, "auto|cpu|cuda|sim", "auto", JOB,                               \
      "where a rank computes: auto (its GPU when the node has one, else cpu), cpu, cuda, sim")    \
    X(memory_limit, "memory_limit", BYTES, 0, INT64_MAX, NULL, "0", JOB,                            \
      "bytes a rank may hold (every category together); 0: what its device has")                  \
    X(allow_fp16, "allow_fp16", ENUM, 0, 0, "false|true", "false", MODEL,                          \
      "precision = auto may choose fp16 (it changes numerics: the loss scaler runs)")              \
    X(tf32, "tf32", ENUM, 0, 0, "false|true", "false", JOB,                                         \
      "on a GPU, fp32 GEMMs may use TF32 tensor cores (faster, about 1e-3 relative error)")        \
    X(lr, "lr", NUM, 0, 1e6, NULL, "0.001", JOB,                                                    \
      "ds.optim.AdamW's learning rate when the script gives none; the schedule's peak")           \
    X(beta1, "beta1", NUM, 0, 0.999999999, NULL, "0.9", JOB,                                        \
      "ds.optim.AdamW's first-moment decay when the script gives no betas")                       \
    X(beta2, "beta2", NUM, 0, 0.999999999, NULL, "0.999", JOB,                                      \
      "ds.optim.AdamW's second-moment decay when the script gives no betas")                      \
    X(eps, "eps", NUM, 0, 1, NULL, "1e-8", JOB,                                                    \
      "ds.optim.AdamW's epsilon when the script gives none")                                      \
    X(weight_decay, "weight_decay", NUM, 0, 1e6, NULL, "0", JOB,                                    \
      "ds.optim.AdamW's decoupled weight decay when the script gives none")                       \
    X(lr_schedule, "lr_schedule", ENUM, 0, 0, "constant|warmup|warmup_decay|warmup_cosine",         \
      "constant", JOB, "ds.optim.schedule(): constant lr, warmup then constant, warmup then "     \
      "linear decay, warmup then cosine decay")                                                    \
    X(warmup_type, "warmup_type", ENUM, 0, 0, "linear|log", "linear", JOB,                          \
      "how the schedule's warmup rises from warmup_min_lr to lr")                                  \
    X(warmup_steps, "warmup_steps", INT, 0, 1 << 30, NULL, "0", JOB,                                \
      "the schedule's warmup, in optimizer steps")                                                 \
    X(warmup_min_lr, "warmup_min_lr", NUM, 0, 1e6, NULL, "0", JOB,                                  \
      "the lr the warmup starts from (warmup_decay also ends there)")                              \
    X(min_lr, "min_lr", NUM, 0, 1e6, NULL, "0", JOB, "the lr warmup_cosine decays to")             \
    X(total_steps, "total_steps", INT, 0, 1 << 30, NULL, "0", JOB,                                  \
      "the step warmup_decay and warmup_cosine end at (0: none; they need one)")

typedef enum { DS_OPT_INT, DS_OPT_ENUM, DS_OPT_CKPT, DS_OPT_NUM, DS_OPT_BYTES } ds_opt_type;
typedef enum { DS_OPT_STAGE, DS_OPT_MODEL, DS_OPT_JOB } ds_opt_scope;

/* A STAGE option's value `auto`: the planner's to choose. Never reaches a stage. */
#define DS_ENGINE_AUTO (-1)

/* The C type of each option type's values. */
#define DS_OPT_CTYPE_INT int64_t
#define DS_OPT_CTYPE_ENUM int64_t
#define DS_OPT_CTYPE_CKPT int64_t
#define DS_OPT_CTYPE_BYTES int64_t
#define DS_OPT_CTYPE_NUM double

/* Every option's value, by name: spec->engine.zero, ... */
typedef struct ds_engine_opts {
#define DS_X(name, key, type, lo, hi, choices, dflt, scope, doc) DS_OPT_CTYPE_##type name;
    DS_ENGINE_OPTIONS(DS_X)
#undef DS_X
} ds_engine_opts;

enum {
#define DS_X(name, key, type, lo, hi, choices, dflt, scope, doc) DS_EO_##name,
    DS_ENGINE_OPTIONS(DS_X)
#undef DS_X
    DS_EO_COUNT
};

typedef struct ds_engine_opt {
    const char *name, *key;
    ds_opt_type type;
    double lo, hi;
    const char *choices;
    const char *dflt;
    ds_opt_scope scope;
    const char *doc;
    size_t off; /* of the value in ds_engine_opts */
} ds_engine_opt;

extern const ds_engine_opt DS_ENGINE_OPTS[DS_EO_COUNT];

static inline int ds_engine_opt_takes_auto(const ds_engine_opt *o) { return o->scope == DS_OPT_STAGE; }

/* By Lua/C name or by job-spec key; NULL when there is none. */
const ds_engine_opt *ds_engine_opt_named(const char *name);
const ds_engine_opt *ds_engine_opt_keyed(const char *key);

/* The defaults. */
void ds_engine_opts_init(ds_engine_opts *o);

/* Parses text as option o's value into o's field of out. 0, or -1 with why set to what
 * was wrong and what is expected ("5 is out of range: expected an integer in 0..3"). */
int ds_engine_opt_parse(const ds_engine_opt *o, const char *text, ds_engine_opts *out, char *why,
                        size_t why_len);
/* Checks an integer (INT, ENUM index, CKPT span, BYTES) or a number (NUM) against o's
 * type and range, as parse would: what Lua bindings use for values that are not text. */
int ds_engine_opt_check_int(const ds_engine_opt *o, int64_t v, char *why, size_t why_len);
int ds_engine_opt_check_num(const ds_engine_opt *o, double v, char *why, size_t why_len);
/* Option o's value in v as a job spec would write it. */
void ds_engine_opt_format(const ds_engine_opt *o, const ds_engine_opts *v, char *buf, size_t len);
/* What o accepts, in words: "an integer in 0..3", "one of fp32, bf16, fp16", ... */
void ds_engine_opt_expect(const ds_engine_opt *o, char *buf, size_t len);
/* Checks across options (min_loss_scale within the initial scale). 0, or -1 with why set
 * and *a, *b the two options involved. */
int ds_engine_opts_check(const ds_engine_opts *v, const ds_engine_opt **a, const ds_engine_opt **b,
                         char *why, size_t why_len);

static inline int64_t *ds_engine_opt_int(const ds_engine_opt *o, ds_engine_opts *v) {
    return (int64_t *)((char *)v + o->off);
}
static inline double *ds_engine_opt_num(const ds_engine_opt *o, ds_engine_opts *v) {
    return (double *)((char *)v + o->off);
}
/* The environment variable of o ("DS_ENGINE_ZERO"). */
void ds_engine_opt_env_name(const ds_engine_opt *o, char *buf, size_t len);
/* All options from the environment (DS_ENGINE_*), defaults where unset. 0, or -1 with
 * why naming the variable, its value and what it expects. */
int ds_engine_opts_from_env(ds_engine_opts *out, char *why, size_t why_len);

#endif
