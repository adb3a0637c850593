/* `dsrun ckpt export`: a sharded checkpoint becomes one safetensors file holding the
 * tensors the engine's export table names, transposed where it asks, read back with the
 * data part's safetensors reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt_export.h"
#include "ckpt_test_util.h"
#include "kernel_math.h"
#include "safetensors.h"
#include "subcommands.h"

static const char *TABLE =
    "{\"zero\":3,\"export\":{\"metadata\":{\"format\":\"pt\"},\"tensors\":["
    "{\"name\":\"transformer.h.0.mlp.c_fc.weight\",\"array\":\"embed/params\",\"offset\":0,"
    "\"shape\":[2,3],\"transpose\":true},"
    "{\"name\":\"transformer.wpe.weight\",\"array\":\"embed/params\",\"offset\":6,\"shape\":[5]},"
    "{\"name\":\"transformer.h.0.ln_1.weight\",\"array\":\"h/params\",\"offset\":0,\"shape\":[2,2,2]}]}}";

typedef struct fixture {
    char *dir, out[4300];
    test_array a[2];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = make_scratch_dir();
    f->a[0] = (test_array){"embed/params", DS_F32, 11, 0, NULL};
    f->a[1] = (test_array){"h/params", DS_BF16, 8, 0, NULL};
    fill_array(&f->a[0], 5);
    fill_array(&f->a[1], 6);
    snprintf(f->out, sizeof f->out, "%s/model.safetensors", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rm_rf(f->dir);
    free(f->dir);
    free_arrays(f->a, 2);
    free(f);
    return 0;
}

static int export_with(fixture *f, const char *engine, ds_err *err) {
    if (save_sequential(f->dir, 1, 3, f->a, 2, engine, err)) return -2;
    ds_ckpt *ck = ds_ckpt_open(f->dir, err);
    if (!ck) return -2;
    int rc = ds_ckpt_export_safetensors(ck, f->out, err);
    ds_ckpt_close(ck);
    rm_rf(f->dir); /* fresh directory for the next call */
    return rc;
}

static void test_export_gpt_names(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    char keep[4300];
    snprintf(keep, sizeof keep, "%s.out", f->dir);
    snprintf(f->out, sizeof f->out, "%s", keep);
    if (export_with(f, TABLE, &err)) fail_msg("export: %s", err.msg);
    ds_st_file *st = ds_st_open(keep, &err);
    if (!st) fail_msg("read back: %s", err.msg);
    assert_int_equal(ds_st_count(st), 3);
    assert_string_equal(ds_st_meta_get(st, "format"), "pt");

    const ds_st_tensor *t = ds_st_find(st, "transformer.h.0.mlp.c_fc.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, DS_ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 2);
    const float *src = f->a[0].data;
    float got[6];
    memcpy(got, t->data, sizeof got);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) assert_true(got[j * 2 + i] == src[i * 3 + j]);

    t = ds_st_find(st, "transformer.wpe.weight");
    assert_int_equal(t->ndim, 1);
    assert_int_equal(t->shape[0], 5);
    assert_memory_equal(t->data, src + 6, 5 * sizeof(float));

    t = ds_st_find(st, "transformer.h.0.ln_1.weight");
    assert_int_equal(t->dtype, DS_ST_BF16);
    assert_int_equal(t->ndim, 3);
    assert_memory_equal(t->data, f->a[1].data, 8 * 2);
    ds_st_close(st);
    remove(keep);
}

/* "dtype": an fp32 array written as bf16 / fp16, rounded to nearest even (the engine's
 * rounding of a 16-bit stage's masters), transposed after. */
static void test_export_narrowed(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    char keep[4300];
    snprintf(keep, sizeof keep, "%s.out", f->dir);
    snprintf(f->out, sizeof f->out, "%s", keep);
    const char *engine =
        "{\"export\":{\"tensors\":["
        "{\"name\":\"b\",\"array\":\"embed/params\",\"offset\":0,\"shape\":[2,3],"
        "\"transpose\":true,\"dtype\":\"bf16\"},"
        "{\"name\":\"h\",\"array\":\"embed/params\",\"offset\":6,\"shape\":[5],\"dtype\":\"fp16\"},"
        "{\"name\":\"same\",\"array\":\"h/params\",\"offset\":0,\"shape\":[8],\"dtype\":\"bf16\"}]}}";
    if (export_with(f, engine, &err)) fail_msg("export: %s", err.msg);
    ds_st_file *st = ds_st_open(keep, &err);
    if (!st) fail_msg("read back: %s", err.msg);
    const float *src = f->a[0].data;
    const ds_st_tensor *t = ds_st_find(st, "b");
    assert_int_equal(t->dtype, DS_ST_BF16);
    assert_int_equal(t->shape[0], 3);
    uint16_t got[8];
    memcpy(got, t->data, 6 * 2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) assert_int_equal(got[j * 2 + i], ds_km_f32_to_bf16(src[i * 3 + j]));
    t = ds_st_find(st, "h");
    assert_int_equal(t->dtype, DS_ST_F16);
    memcpy(got, t->data, 5 * 2);
    for (int i = 0; i < 5; i++) assert_int_equal(got[i], ds_km_f32_to_f16(src[6 + i]));
    t = ds_st_find(st, "same"); /* a bf16 array as bf16: as it is */
    assert_memory_equal(t->data, f->a[1].data, 8 * 2);
    ds_st_close(st);
    remove(keep);
}

static void test_export_refusals(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    struct { const char *engine, *frag; } cases[] = {
        {"{\"zero\":1}", "engine.export: missing"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"embed/params\",\"offset\":9,"
         "\"shape\":[3]}]}}", "'x': elements [9, +3) outside array 'embed/params' of 11"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"nope\",\"offset\":0,"
         "\"shape\":[3]}]}}", "export 'x': "},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"h/params\",\"offset\":0,"
         "\"shape\":[2,2,2],\"transpose\":true}]}}", "transpose needs a 2-D shape"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"h/params\",\"offset\":-1,"
         "\"shape\":[2]}]}}", "\"offset\" missing or not an integer"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"h/params\",\"offset\":0,"
         "\"shape\":[4294967296,4294967296]}]}}", "bad size in \"shape\""},
        {"{\"export\":{\"metadata\":{\"a\":1},\"tensors\":[{\"name\":\"x\",\"array\":\"h/params\","
         "\"offset\":0,\"shape\":[2]}]}}", "metadata.a: must be a string"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"h/params\",\"offset\":0,"
         "\"shape\":[2],\"dtype\":\"fp32\"}]}}", "'x': cannot write a bf16 array as fp32"},
        {"{\"export\":{\"tensors\":[{\"name\":\"x\",\"array\":\"embed/params\",\"offset\":0,"
         "\"shape\":[2],\"dtype\":\"int8\"}]}}", "'x': \"dtype\" must be \"fp32\", \"bf16\" or \"fp16\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(export_with(f, cases[i].engine, &err), -1);
        if (!strstr(err.msg, cases[i].frag) || !strstr(err.msg, "meta.json"))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, cases[i].frag);
    }
}

/* Runs `dsrun ckpt ARGS...` in this process with stdout and stderr captured in out. */
static int run_cmd(char *out, size_t cap, int argc, char **argv) {
    char path[] = "/tmp/ds-ckpt-cmd-XXXXXX";
    int fd = mkstemp(path);
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2);
    dup2(fd, 1);
    dup2(fd, 2);
    int rc = dsrun_ckpt_main(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return rc;
}

static void test_dsrun_ckpt(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    assert_int_equal(save_sequential(f->dir, 9, 3, f->a, 2, TABLE, &err), 0);
    static char out[16384];
    char *inspect[] = {"ckpt", "inspect", f->dir};
    assert_int_equal(run_cmd(out, sizeof out, 3, inspect), 0);
    assert_non_null(strstr(out, "step 9, saved by 3 ranks"));
    assert_non_null(strstr(out, "embed/params"));
    assert_non_null(strstr(out, "0:[0,4) 1:[4,8) 2:[8,11)"));
    assert_non_null(strstr(out, "all checksums verified"));
    /* not a terminal: the engine object on one line, as saved; --pretty indents it */
    assert_non_null(strstr(out, "engine: {\"zero\":3,\"export\":{"));
    char *pretty[] = {"ckpt", "inspect", "--pretty", f->dir};
    assert_int_equal(run_cmd(out, sizeof out, 4, pretty), 0);
    assert_non_null(strstr(out, "engine: {\n  \"zero\": 3,\n  \"export\": {\n    \"metadata\": {"));
    char *compact[] = {"ckpt", "inspect", "--compact", f->dir};
    assert_int_equal(run_cmd(out, sizeof out, 4, compact), 0);
    assert_non_null(strstr(out, "engine: {\"zero\":3,"));

    char *export[] = {"ckpt", "export", f->dir, f->out};
    assert_int_equal(run_cmd(out, sizeof out, 4, export), 0);
    ds_st_file *st = ds_st_open(f->out, &err);
    assert_non_null(st);
    assert_int_equal(ds_st_count(st), 3);
    ds_st_close(st);

    char shard[4400];
    snprintf(shard, sizeof shard, "%s/step-9/rank-2-of-3.bin", f->dir);
    corrupt_byte(shard, 3);
    assert_int_equal(run_cmd(out, sizeof out, 3, inspect), 1);
    assert_non_null(strstr(out, "rank-2-of-3.bin: corrupted"));
    assert_non_null(strstr(out, "1 of 3 shards failed verification"));
    assert_int_equal(run_cmd(out, sizeof out, 4, export), 1);
    assert_non_null(strstr(out, "rank-2-of-3.bin: corrupted"));

    char *bad[] = {"ckpt", "frobnicate"};
    assert_int_equal(run_cmd(out, sizeof out, 2, bad), 2);
    assert_non_null(strstr(out, "usage: dsrun ckpt"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_export_gpt_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_narrowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_export_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dsrun_ckpt, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
