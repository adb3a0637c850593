/* DeepSpeed JSON configs onto the engine's options (launcher/ds_config.c): each key that
 * maps, the ones that do not (listed, with why), wrong types and ranges (file:line and the
 * key's path), DeepSpeed's train_batch_size rule, "auto", and the job spec's precedence. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds_config.h"
#include "jobspec.h"

#define MIN "[job]\nname = t\nscript = s.lua\n"

typedef struct run {
    ds_jobspec spec;
    ds_dsconfig_notes notes;
    ds_err err;
    int rc;
} run;

/* Applies json (as "ds.json") to a spec parsed from ini, in a world of world ranks. */
static run *apply(const char *ini, const char *json, int world) {
    run *r = calloc(1, sizeof *r);
    ds_err e = {""};
    if (ds_jobspec_parse(&r->spec, "/jobs/job.ini", ini, &e) != 0) fail_msg("spec: %s", e.msg);
    r->rc = ds_dsconfig_apply_text(&r->spec, "ds.json", json, strlen(json), world, &r->notes, &r->err);
    return r;
}

static void done(run *r) {
    ds_dsconfig_notes_free(&r->notes);
    ds_jobspec_free(&r->spec);
    free(r);
}

static void ok(run *r) {
    if (r->rc != 0) fail_msg("unexpected error: %s", r->err.msg);
}

/* The error contains needle. */
static void expect_err(const char *ini, const char *json, int world, const char *needle) {
    run *r = apply(ini, json, world);
    if (r->rc == 0 || !strstr(r->err.msg, needle))
        fail_msg("for %s\nexpected an error with '%s', got rc %d '%s'", json, needle, r->rc, r->err.msg);
    done(r);
}

static void expect_in(const char *hay, const char *needle) {
    if (!hay || !strstr(hay, needle)) fail_msg("expected '%s' in:\n%s", needle, hay ? hay : "(null)");
}

static void test_zero_and_precision(void **st) {
    (void)st;
    run *r = apply(MIN, "{\"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 5e8},\n"
                        " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 100,\n"
                        "          \"hysteresis\": 3, \"min_loss_scale\": 2, \"loss_scale\": 0}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.zero, 2);
    assert_int_equal(r->spec.engine.reduce_bucket_size, 500000000);
    assert_int_equal(r->spec.engine.precision, 2); /* fp16 */
    assert_int_equal(r->spec.engine.initial_scale_power, 12);
    assert_int_equal(r->spec.engine.loss_scale_window, 100);
    assert_int_equal(r->spec.engine.hysteresis, 3);
    assert_int_equal(r->spec.engine.min_loss_scale, 2);
    assert_true(r->spec.engine_given[DS_EO_zero] && r->spec.engine_given[DS_EO_precision]);
    expect_in(r->notes.applied, "zero_optimization.stage -> zero_stage = 2");
    expect_in(r->notes.applied, "fp16.enabled -> precision = fp16");
    assert_string_equal(r->notes.ignored, ""); /* loss_scale 0 is dynamic: what the engine does */
    done(r);

    r = apply(MIN, "{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.precision, 1);
    assert_int_equal(r->spec.engine.zero, 3);
    done(r);
    r = apply(MIN, "{\"fp16\": {\"enabled\": false}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.precision, 0);
    done(r);
    expect_err(MIN, "{\"fp16\": {\"enabled\": true},\n\"bf16\": {\"enabled\": true}}", 1,
               "ds.json:2: bf16.enabled: fp16 and bf16 are both enabled");
    /* a static scale is not what the engine does: listed */
    r = apply(MIN, "{\"fp16\": {\"enabled\": true, \"loss_scale\": 128, \"consecutive_hysteresis\": true}}", 1);
    ok(r);
    expect_in(r->notes.ignored, "fp16.loss_scale: a static loss scale");
    expect_in(r->notes.ignored, "fp16.consecutive_hysteresis:");
    done(r);
}

static void test_batch_rule(void **st) {
    (void)st;
    /* any two give the third */
    run *r = apply(MIN, "{\"train_batch_size\": 32, \"gradient_accumulation_steps\": 2}", 2);
    ok(r);
    assert_int_equal(r->spec.engine.micro_batch, 8);
    assert_int_equal(r->spec.engine.grad_accum, 2);
    done(r);
    r = apply(MIN, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4}", 2);
    ok(r);
    assert_int_equal(r->spec.engine.grad_accum, 4);
    done(r);
    r = apply(MIN, "{\"train_batch_size\": 24}", 3);
    ok(r);
    assert_int_equal(r->spec.engine.micro_batch, 8);
    assert_int_equal(r->spec.engine.grad_accum, 1);
    done(r);
    r = apply(MIN, "{\"train_batch_size\": 48, \"train_micro_batch_size_per_gpu\": 4, "
                   "\"gradient_accumulation_steps\": 3}", 4);
    ok(r);
    done(r);
    /* all three must agree */
    expect_err(MIN, "{\"train_batch_size\": 32, \"train_micro_batch_size_per_gpu\": 4,\n"
                    " \"gradient_accumulation_steps\": 3}", 2,
               "ds.json: train_batch_size: 32 is not train_micro_batch_size_per_gpu 4 x "
               "gradient_accumulation_steps 3 x world size 2 = 24");
    expect_err(MIN, "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4}", 2,
               "train_batch_size: 30 is not a multiple of train_micro_batch_size_per_gpu 4 x world size 2");
    expect_err(MIN, "{\"train_batch_size\": 0}", 1, "ds.json:1: train_batch_size: 0: expected an integer >= 1");
    /* the job's [engine] micro_batch counts as given: train_batch_size is checked against it */
    expect_err(MIN "[engine]\nmicro_batch = 3\n", "{\"train_batch_size\": 16, \"gradient_accumulation_steps\": 2}",
               2, "16 is not train_micro_batch_size_per_gpu 3 x gradient_accumulation_steps 2");
    r = apply(MIN "[engine]\nmicro_batch = 4\n", "{\"train_batch_size\": 16}", 2);
    ok(r);
    assert_int_equal(r->spec.engine.grad_accum, 2);
    done(r);
}

static void test_auto(void **st) {
    (void)st;
    run *r = apply(MIN "[engine]\nprecision = bf16\n",
                   "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4,\n"
                   " \"gradient_accumulation_steps\": \"auto\", \"bf16\": {\"enabled\": \"auto\"},\n"
                   " \"gradient_clipping\": \"auto\", \"zero_optimization\": {\"stage\": 3,\n"
                   " \"reduce_bucket_size\": \"auto\", \"stage3_prefetch_bucket_size\": \"auto\"},\n"
                   " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": \"auto\", \"betas\": \"auto\"}}}",
                   2);
    ok(r);
    assert_int_equal(r->spec.engine.micro_batch, 4);
    assert_int_equal(r->spec.engine.grad_accum, 1);
    assert_int_equal(r->spec.engine.precision, 1);
    expect_in(r->notes.resolved, "train_batch_size = auto -> 8 (micro_batch 4 x grad_accum 1 x 2 ranks)");
    expect_in(r->notes.resolved, "gradient_accumulation_steps = auto -> grad_accum = 1");
    expect_in(r->notes.resolved, "bf16.enabled = auto -> precision = bf16 (the job's [engine] or --set)");
    expect_in(r->notes.resolved, "gradient_clipping = auto -> gradient_clipping = 0 (the engine's default)");
    expect_in(r->notes.resolved, "zero_optimization.reduce_bucket_size = auto -> reduce_bucket_size = 1048576");
    expect_in(r->notes.resolved, "optimizer.params.lr = auto -> lr = 0.001");
    assert_string_equal(r->notes.ignored, ""); /* "auto" for a key the engine lacks asks nothing */
    done(r);
    /* a micro batch left to "auto" is what train_batch_size makes it */
    r = apply(MIN, "{\"train_batch_size\": 12, \"train_micro_batch_size_per_gpu\": \"auto\"}", 3);
    ok(r);
    assert_int_equal(r->spec.engine.micro_batch, 4);
    expect_in(r->notes.resolved, "train_micro_batch_size_per_gpu = auto -> micro_batch = 4");
    done(r);
}

static void test_precedence(void **st) {
    (void)st;
    run *r = apply(MIN "[engine]\nzero_stage = 1\nprecision = bf16\n",
                   "{\"zero_optimization\": {\"stage\": 3}, \"fp16\": {\"enabled\": true},\n"
                   " \"gradient_clipping\": 0.5}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.zero, 1);
    assert_int_equal(r->spec.engine.precision, 1);
    assert_true(r->spec.engine.gradient_clipping == 0.5);
    expect_in(r->notes.kept, "zero_optimization.stage -> zero_stage = 3: the job's zero_stage = 1 kept");
    expect_in(r->notes.kept, "fp16.enabled -> precision = fp16: the job's precision = bf16 kept");
    done(r);
    /* a --set is as explicit as the file */
    ds_jobspec spec;
    ds_err e = {""};
    assert_int_equal(ds_jobspec_parse(&spec, "/jobs/job.ini", MIN, &e), 0);
    const char *sets[] = {"engine.zero_stage=2"};
    assert_int_equal(ds_jobspec_override(&spec, sets, 1, &e), 0);
    ds_dsconfig_notes notes;
    const char *json = "{\"zero_optimization\": {\"stage\": 3}}";
    assert_int_equal(ds_dsconfig_apply_text(&spec, "ds.json", json, strlen(json), 1, &notes, &e), 0);
    assert_int_equal(spec.engine.zero, 2);
    ds_dsconfig_notes_free(&notes);
    ds_jobspec_free(&spec);
    /* steps_per_print goes to [monitor], unless the spec gives it */
    r = apply(MIN, "{\"steps_per_print\": 5}", 1);
    ok(r);
    assert_int_equal(r->spec.steps_per_print, 5);
    done(r);
    r = apply(MIN "[monitor]\nsteps_per_print = 7\n", "{\"steps_per_print\": 5}", 1);
    ok(r);
    assert_int_equal(r->spec.steps_per_print, 7);
    expect_in(r->notes.kept, "steps_per_print -> 5: the job's [monitor] steps_per_print = 7 kept");
    done(r);
}

static void test_optimizer_and_schedules(void **st) {
    (void)st;
    run *r = apply(MIN, "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 3e-4, \"betas\": [0.8, 0.95],\n"
                        " \"eps\": 1e-6, \"weight_decay\": 0.01, \"amsgrad\": true}}, \"gradient_clipping\": 1.0}", 1);
    ok(r);
    assert_true(r->spec.engine.lr == 3e-4 && r->spec.engine.beta1 == 0.8 && r->spec.engine.beta2 == 0.95);
    assert_true(r->spec.engine.eps == 1e-6 && r->spec.engine.weight_decay == 0.01);
    assert_true(r->spec.engine.gradient_clipping == 1.0);
    expect_in(r->notes.ignored, "optimizer.params.amsgrad: no AMSGrad");
    done(r);
    r = apply(MIN, "{\"optimizer\": {\"type\": \"Lamb\", \"params\": {\"lr\": 1}}}", 1);
    ok(r);
    assert_true(r->spec.engine.lr == 0.001);
    expect_in(r->notes.ignored, "optimizer: Lamb: the engine's optimizers are AdamW and SGD");
    done(r);
    /* WarmupLR sets the lr; DeepSpeed's defaults for what it leaves out (log, 1000 steps) */
    r = apply(MIN, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},\n"
                   " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_max_lr\": 2e-3}}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.lr_schedule, 1);
    assert_true(r->spec.engine.lr == 2e-3);
    assert_int_equal(r->spec.engine.warmup_type, 1); /* log */
    assert_int_equal(r->spec.engine.warmup_steps, 1000);
    expect_in(r->notes.ignored, "optimizer.params.lr: the scheduler's warmup_max_lr sets the lr");
    done(r);
    r = apply(MIN, "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": 100,\n"
                   " \"warmup_num_steps\": 1, \"warmup_min_lr\": 1e-5, \"warmup_type\": \"linear\"}}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.lr_schedule, 2);
    assert_int_equal(r->spec.engine.total_steps, 100);
    assert_int_equal(r->spec.engine.warmup_steps, 2); /* DeepSpeed warms up over >= 2 steps */
    assert_true(r->spec.engine.warmup_min_lr == 1e-5);
    done(r);
    r = apply(MIN, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 2e-3}},\n"
                   " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 50,\n"
                   " \"warmup_num_steps\": 5, \"warmup_min_ratio\": 0.5, \"cos_min_ratio\": 0.1}}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.lr_schedule, 3);
    assert_true(r->spec.engine.warmup_min_lr == 0.5 * 2e-3 && r->spec.engine.min_lr == 0.1 * 2e-3);
    done(r);
    expect_err(MIN, "{\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {}}}", 1,
               "scheduler.params.total_num_steps: missing (WarmupCosineLR needs it)");
    r = apply(MIN, "{\"scheduler\": {\"type\": \"OneCycle\", \"params\": {}}}", 1);
    ok(r);
    assert_int_equal(r->spec.engine.lr_schedule, 0);
    expect_in(r->notes.ignored, "scheduler: OneCycle:");
    done(r);
}

static void test_not_applied(void **st) {
    (void)st;
    run *r = apply(MIN, "{\"zero_optimization\": {\"stage\": 2, \"overlap_comm\": true,\n"
                        " \"offload_optimizer\": {\"device\": \"none\"}, \"offload_param\": {\"device\": \"cpu\"}},\n"
                        " \"activation_checkpointing\": {\"partition_activations\": true, \"cpu_checkpointing\": true},\n"
                        " \"wall_clock_breakdown\": false, \"tensorboard\": {\"enabled\": true}, \"trian_batch_size\": 8}", 1);
    ok(r);
    const char *n = r->notes.ignored;
    expect_in(n, "zero_optimization.overlap_comm: the engine has no such setting");
    expect_in(n, "zero_optimization.offload_param: no CPU or NVMe offload");
    assert_null(strstr(n, "offload_optimizer")); /* device none asks for nothing */
    expect_in(n, "activation_checkpointing.partition_activations: no model parallelism");
    expect_in(n, "activation_checkpointing.cpu_checkpointing:");
    assert_null(strstr(n, "wall_clock_breakdown")); /* off */
    expect_in(n, "tensorboard: [monitor] outputs");
    expect_in(n, "trian_batch_size: unknown");
    done(r);
}

static void test_bad_values(void **st) {
    (void)st;
    expect_err(MIN, "{\n\"zero_optimization\": {\n  \"stage\": \"2\"}}", 1,
               "ds.json:3: zero_optimization.stage: expected an integer, got a string");
    expect_err(MIN, "{\"zero_optimization\": {\"stage\": 4}}", 1,
               "ds.json:1: zero_optimization.stage: 4 is out of range; expected an integer in 0..3");
    expect_err(MIN, "{\"zero_optimization\": {\"reduce_bucket_size\": 2.5}}", 1,
               "zero_optimization.reduce_bucket_size: 2.5 is not an integer");
    expect_err(MIN, "{\"fp16\": {\"enabled\": 1}}", 1, "fp16.enabled: expected true or false, got a number");
    expect_err(MIN, "{\"fp16\": []}", 1, "fp16: expected an object, got an array");
    expect_err(MIN, "{\"gradient_clipping\": \"1.0\"}", 1, "gradient_clipping: expected a number, got a string");
    expect_err(MIN, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}", 1,
               "optimizer.params.betas: expected [beta1, beta2]");
    expect_err(MIN, "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9, 1.5]}}}", 1,
               "optimizer.params.betas[1]: 1.5 is out of range");
    expect_err(MIN, "{\"optimizer\": {\"params\": {}}}", 1, "optimizer.type: missing");
    expect_err(MIN, "{\"fp16\": {\"initial_scale_power\": 2, \"min_loss_scale\": 8}}", 1,
               "ds.json: min_loss_scale (8) is above the initial scale 2^2");
    expect_err(MIN, "[1, 2]", 1, "ds.json:1: (top): expected an object, got an array");
    expect_err(MIN, "{\"a\": }", 1, "ds.json: not JSON: byte");
}

/* A file: relative to the spec's folder in [engine], missing is an error naming it. */
static void test_file(void **st) {
    (void)st;
    char dir[] = "/tmp/dscfgXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], ini[512];
    snprintf(path, sizeof path, "%s/ds.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"zero_optimization\": {\"stage\": 1}}\n", f);
    fclose(f);
    snprintf(ini, sizeof ini, "%s/job.ini", dir);
    ds_jobspec spec;
    ds_err e = {""};
    assert_int_equal(ds_jobspec_parse(&spec, ini, MIN "[engine]\ndeepspeed_config = ds.json\n", &e), 0);
    assert_string_equal(spec.deepspeed_config, path);
    ds_dsconfig_notes notes;
    assert_int_equal(ds_dsconfig_apply(&spec, 1, &notes, &e), 0);
    assert_int_equal(spec.engine.zero, 1);
    ds_dsconfig_notes_free(&notes);
    ds_jobspec_free(&spec);
    assert_int_equal(ds_jobspec_parse(&spec, ini, MIN "[engine]\ndeepspeed_config = nope.json\n", &e), 0);
    assert_int_not_equal(ds_dsconfig_apply(&spec, 1, &notes, &e), 0);
    expect_in(e.msg, "nope.json");
    ds_dsconfig_notes_free(&notes);
    ds_jobspec_free(&spec);
    remove(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_and_precision),
        cmocka_unit_test(test_batch_rule),
        cmocka_unit_test(test_auto),
        cmocka_unit_test(test_precedence),
        cmocka_unit_test(test_optimizer_and_schedules),
        cmocka_unit_test(test_not_applied),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
