/* The engine-option table (common/engine_opts.h): every default parses, every value
 * written back reads back the same, the environment round-trips, bad values are refused
 * with what was expected, and docs/jobspec.md's [engine] table has one row per option
 * with its key and default (the docs follow the table, not the other way round). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ds_textfile.h"
#include "engine_opts.h"

static void test_defaults_parse_and_round_trip(void **state) {
    (void)state;
    ds_engine_opts d;
    ds_engine_opts_init(&d);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        const ds_engine_opt *o = &DS_ENGINE_OPTS[i];
        ds_engine_opts v;
        char why[400], text[64];
        memset(&v, 0xa5, sizeof v);
        if (ds_engine_opt_parse(o, o->dflt, &v, why, sizeof why) != 0) fail_msg("%s: %s", o->name, why);
        ds_engine_opt_format(o, &v, text, sizeof text);
        ds_engine_opts w;
        memset(&w, 0x5a, sizeof w);
        if (ds_engine_opt_parse(o, text, &w, why, sizeof why) != 0) fail_msg("%s: '%s': %s", o->name, text, why);
        assert_memory_equal((char *)&v + o->off, (char *)&w + o->off, o->type == DS_OPT_NUM ? sizeof(double) : sizeof(int64_t));
        assert_memory_equal((char *)&d + o->off, (char *)&v + o->off, o->type == DS_OPT_NUM ? sizeof(double) : sizeof(int64_t));
        assert_ptr_equal(ds_engine_opt_named(o->name), o);
        assert_ptr_equal(ds_engine_opt_keyed(o->key), o);
    }
}

static void expect_refused(const char *name, const char *text, const char *want) {
    const ds_engine_opt *o = ds_engine_opt_named(name);
    assert_non_null(o);
    ds_engine_opts v;
    char why[400] = "";
    assert_int_equal(ds_engine_opt_parse(o, text, &v, why, sizeof why), -1);
    if (!strstr(why, want)) fail_msg("%s = '%s': '%s' lacks '%s'", name, text, why, want);
}

static void test_values(void **state) {
    (void)state;
    ds_engine_opts v;
    char why[400], text[64];
    const ds_engine_opt *ck = ds_engine_opt_named("checkpoint");
    struct { const char *in, *out; int64_t n; } ckpts[] = {
        {"none", "none", 0}, {"full", "full", 1}, {"every:1", "full", 1}, {"every:3", "every:3", 3}, {"4", "every:4", 4}};
    for (size_t i = 0; i < sizeof ckpts / sizeof ckpts[0]; i++) {
        assert_int_equal(ds_engine_opt_parse(ck, ckpts[i].in, &v, why, sizeof why), 0);
        assert_int_equal(v.checkpoint, ckpts[i].n);
        ds_engine_opt_format(ck, &v, text, sizeof text);
        assert_string_equal(text, ckpts[i].out);
    }
    assert_int_equal(ds_engine_opt_parse(ds_engine_opt_named("precision"), "fp16", &v, why, sizeof why), 0);
    assert_int_equal(v.precision, 2);
    /* DeepSpeed configs write sizes as 5e8: integral numbers are integers */
    assert_int_equal(ds_engine_opt_parse(ds_engine_opt_named("reduce_bucket_size"), "5e8", &v, why, sizeof why), 0);
    assert_int_equal(v.reduce_bucket_size, 500000000);
    assert_int_equal(ds_engine_opt_parse(ds_engine_opt_named("seed"), "9223372036854775807", &v, why, sizeof why), 0);
    assert_true(v.seed == INT64_MAX);
    expect_refused("zero", "4", "4 is out of range; expected an integer in 0..3");
    expect_refused("zero", "two", "'two' is not an integer");
    expect_refused("precision", "bfloat16", "expected one of fp32|bf16|fp16");
    expect_refused("checkpoint", "every:0", "expected none, full or every:N");
    expect_refused("reduce_bucket_size", "2.5", "not an integer");
    expect_refused("seed", "9223372036854775808", "out of range");
    expect_refused("micro_batch", "", "not an integer");
    /* a stage option may be left to the planner; no other option may */
    const char *stage_opts[] = {"zero", "precision", "checkpoint"};
    for (size_t i = 0; i < 3; i++) {
        const ds_engine_opt *o = ds_engine_opt_named(stage_opts[i]);
        assert_int_equal(ds_engine_opt_parse(o, "auto", &v, why, sizeof why), 0);
        assert_true(*ds_engine_opt_int(o, &v) == DS_ENGINE_AUTO);
        ds_engine_opt_format(o, &v, text, sizeof text);
        assert_string_equal(text, "auto");
    }
    expect_refused("zero", "4", ", or auto");
    expect_refused("micro_batch", "auto", "'auto' is not an integer; expected an integer in 1..1048576");
    expect_refused("device", "automatic", "expected one of auto|cpu|cuda|sim");
    assert_int_equal(ds_engine_opt_parse(ds_engine_opt_named("allow_fp16"), "true", &v, why, sizeof why), 0);
    assert_int_equal(v.allow_fp16, 1);
}

static void test_environment(void **state) {
    (void)state;
    ds_engine_opts v;
    char why[400];
    setenv("DS_ENGINE_ZERO", "2", 1);
    setenv("DS_ENGINE_CHECKPOINT", "every:2", 1);
    assert_int_equal(ds_engine_opts_from_env(&v, why, sizeof why), 0);
    assert_int_equal(v.zero, 2);
    assert_int_equal(v.checkpoint, 2);
    assert_int_equal(v.micro_batch, 1); /* unset: the default */
    setenv("DS_ENGINE_PRECISION", "bfloat16", 1);
    assert_int_equal(ds_engine_opts_from_env(&v, why, sizeof why), -1);
    if (!strstr(why, "DS_ENGINE_PRECISION=bfloat16") || !strstr(why, "fp32|bf16|fp16"))
        fail_msg("%s", why);
    unsetenv("DS_ENGINE_PRECISION");
    setenv("DS_ENGINE_INITIAL_SCALE_POWER", "2", 1);
    setenv("DS_ENGINE_MIN_LOSS_SCALE", "8", 1);
    assert_int_equal(ds_engine_opts_from_env(&v, why, sizeof why), -1);
    if (!strstr(why, "min_loss_scale (8) is above the initial scale 2^2")) fail_msg("%s", why);
    unsetenv("DS_ENGINE_INITIAL_SCALE_POWER");
    unsetenv("DS_ENGINE_MIN_LOSS_SCALE");
    unsetenv("DS_ENGINE_ZERO");
    unsetenv("DS_ENGINE_CHECKPOINT");
}

/* docs/jobspec.md: a row "| `key` | ... | default |" per option. */
static void test_docs_list_every_option(void **state) {
    (void)state;
    ds_err err;
    char *doc = ds_textfile_read(DS_SOURCE_DIR "/docs/jobspec.md", "docs", 1 << 20, &err);
    if (!doc) fail_msg("%s", err.msg);
    const char *engine = strstr(doc, "\n## [engine]");
    assert_non_null(engine);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        const ds_engine_opt *o = &DS_ENGINE_OPTS[i];
        char row[128];
        snprintf(row, sizeof row, "\n| `%s` |", o->key);
        const char *r = strstr(engine, row);
        if (!r) fail_msg("docs/jobspec.md [engine] has no row for %s", o->key);
        const char *eol = strchr(r + 1, '\n');
        char cell[80];
        snprintf(cell, sizeof cell, "| `%s` |", o->dflt);
        const char *d = strstr(r, cell);
        if (!d || d > eol) fail_msg("docs/jobspec.md: the row of %s does not give the default `%s`", o->key, o->dflt);
    }
    free(doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_parse_and_round_trip),
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_docs_list_every_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
