/* Saving from W ranks and reading back any range at any world size (resharding), with
 * uneven splits, empty shares, multi-chunk sections, the engine's opaque state, and the
 * `latest` pointer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt_test_util.h"

typedef struct fixture {
    char *dir;
    test_array arrays[5];
    int n;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = make_scratch_dir();
    /* 1001 over 4 splits 251/251/251/248; 3 over 4 leaves rank 3 empty; 700001 fp32
     * spans three 1 MiB chunks per rank at W=1 and crosses chunk edges at W=2 and 4. */
    test_array a[] = {
        {"stage0/params", DS_F32, 1001, 0, NULL},
        {"stage0/adam_m", DS_F32, 1001, 0, NULL},
        {"stage1/params", DS_BF16, 3, 0, NULL},
        {"stage2/params", DS_F32, 700001, 0, NULL},
        {"rng/state", DS_I32, 6, 1, NULL},
    };
    f->n = 5;
    memcpy(f->arrays, a, sizeof a);
    for (int i = 0; i < f->n; i++) fill_array(&f->arrays[i], (uint32_t)i + 1);
    *state = f;
    return f->dir ? 0 : -1;
}

static int teardown(void **state) {
    fixture *f = *state;
    rm_rf(f->dir);
    free(f->dir);
    free_arrays(f->arrays, f->n);
    free(f);
    return 0;
}

static ds_ckpt *open_ok(const char *path) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(path, &err);
    if (!ck) fail_msg("open %s: %s", path, err.msg);
    return ck;
}

static void test_reshard_4_to_2_and_1(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    if (save_sequential(f->dir, 7, 4, f->arrays, f->n, "{\"lr\":0.001}", &err))
        fail_msg("save: %s", err.msg);
    ds_ckpt *ck = open_ok(f->dir);
    assert_int_equal(ds_ckpt_step(ck), 7);
    assert_int_equal(ds_ckpt_world(ck), 4);
    assert_int_equal(ds_ckpt_narrays(ck), 5);
    for (int i = 0; i < f->n; i++) {
        assert_int_equal(ds_ckpt_expect(ck, f->arrays[i].name, f->arrays[i].dtype,
                                        f->arrays[i].numel, &err), 0);
        for (int w = 1; w <= 8; w++) assert_int_equal(check_read_as(ck, &f->arrays[i], w), 0);
    }
    ds_ckpt_array info;
    assert_int_equal(ds_ckpt_array_info(ck, "stage1/params", &info, &err), 0);
    assert_int_equal(info.npieces, 3); /* rank 3's share of 3 elements over 4 is empty */
    assert_int_equal(ds_ckpt_verify(ck, &err), 0);
    ds_ckpt_close(ck);
}

static void test_any_range(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    if (save_sequential(f->dir, 1, 3, f->arrays, f->n, NULL, &err)) fail_msg("save: %s", err.msg);
    ds_ckpt *ck = open_ok(f->dir);
    const test_array *a = &f->arrays[3];
    float *buf = malloc(a->numel * sizeof *buf);
    uint64_t seed = 12345;
    for (int t = 0; t < 200; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t b = (seed >> 20) % (a->numel + 1);
        uint64_t e = b + ((seed >> 40) % (a->numel - b + 1)) % 300000;
        assert_int_equal(ds_ckpt_read_range(ck, a->name, b, e, buf, &err), 0);
        assert_memory_equal(buf, (float *)a->data + b, (e - b) * sizeof *buf);
    }
    /* Empty and whole ranges; out-of-bounds refused. */
    assert_int_equal(ds_ckpt_read_range(ck, a->name, a->numel, a->numel, buf, &err), 0);
    assert_int_equal(ds_ckpt_read_range(ck, a->name, 0, a->numel, buf, &err), 0);
    assert_memory_equal(buf, a->data, a->numel * sizeof *buf);
    assert_int_equal(ds_ckpt_read_range(ck, a->name, 5, a->numel + 1, buf, &err), -1);
    assert_non_null(strstr(err.msg, "outside"));
    free(buf);
    ds_ckpt_close(ck);
}

static void test_engine_state_round_trip(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    const char *engine = "{ \"stages\": [{\"name\": \"emb\", \"zero\": 1, \"precision\": \"bf16\"}],"
                         " \"data_cursor\": {\"epoch\": 2, \"offset\": 123456789012},"
                         " \"loss_scale\": 65536.0, \"seed\": 42, \"note\": \"caf\\u00e9\" }";
    if (save_sequential(f->dir, 3, 2, f->arrays, f->n, engine, &err)) fail_msg("save: %s", err.msg);
    ds_ckpt *ck = open_ok(f->dir);
    assert_string_equal(ds_ckpt_meta_extra(ck),
                        "{\"stages\":[{\"name\":\"emb\",\"zero\":1,\"precision\":\"bf16\"}],"
                        "\"data_cursor\":{\"epoch\":2,\"offset\":123456789012},"
                        "\"loss_scale\":65536,\"seed\":42,\"note\":\"caf\xc3\xa9\"}");
    ds_ckpt_close(ck);

    /* Bytes that are not UTF-8 are saved as U+FFFD, and the checksum still holds. */
    if (save_sequential(f->dir, 4, 2, f->arrays, f->n, "{\"raw\":\"a\xff\xfe\"}", &err))
        fail_msg("save: %s", err.msg);
    ck = open_ok(f->dir);
    assert_string_equal(ds_ckpt_meta_extra(ck), "{\"raw\":\"a\xef\xbf\xbd\xef\xbf\xbd\"}");
    ds_ckpt_close(ck);

    /* Not an object, or not JSON: rank 0 refuses to commit. */
    assert_int_equal(save_sequential(f->dir, 5, 2, f->arrays, f->n, "[1]", &err), -1);
    assert_non_null(strstr(err.msg, "must be a JSON object"));
    assert_int_equal(save_sequential(f->dir, 5, 2, f->arrays, f->n, "{\"a\":", &err), -1);
    assert_non_null(strstr(err.msg, "not JSON"));

    /* The deepest object meta.json can hold and still be read back; one level more is
     * refused at save time, not discovered at load time. */
    char deep[128];
    for (int levels = 29; levels <= 30; levels++) {
        int k = 0;
        deep[k++] = '{';
        for (int i = 1; i < levels; i++) deep[k++] = '[';
        for (int i = 1; i < levels; i++) deep[k++] = ']';
        deep[k++] = '}';
        deep[k] = '\0';
        /* {[[...]]} is not valid: an object needs keys, so use {"k":[...]} */
        char doc[160];
        snprintf(doc, sizeof doc, "{\"k\":%.*s}", levels * 2 - 2, deep + 1);
        int rc = save_sequential(f->dir, 5 + levels, 2, f->arrays, f->n, doc, &err);
        if (levels == 29) {
            if (rc) fail_msg("29 levels: %s", err.msg);
            ds_ckpt *ck2 = open_ok(f->dir);
            ds_ckpt_close(ck2);
        } else {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(err.msg, "deeper than 29 levels"));
        }
    }
}

static void test_latest_and_steps(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    char name[64];
    assert_int_equal(ds_ckpt_latest(f->dir, name, sizeof name, &err), 0);
    if (save_sequential(f->dir, 10, 2, f->arrays, f->n, NULL, &err)) fail_msg("save: %s", err.msg);
    f->arrays[0].numel = 999; /* the second save differs, so the steps are told apart */
    if (save_sequential(f->dir, 20, 4, f->arrays, f->n, NULL, &err)) fail_msg("save: %s", err.msg);
    assert_int_equal(ds_ckpt_latest(f->dir, name, sizeof name, &err), 1);
    assert_string_equal(name, "step-20");

    ds_ckpt *ck = open_ok(f->dir);
    assert_int_equal(ds_ckpt_step(ck), 20);
    assert_int_equal(ds_ckpt_expect(ck, "stage0/params", DS_F32, 999, &err), 0);
    ds_ckpt_close(ck);
    char path[4200];
    snprintf(path, sizeof path, "%s/step-10", f->dir);
    ck = open_ok(path);
    assert_int_equal(ds_ckpt_step(ck), 10);
    assert_int_equal(ds_ckpt_world(ck), 2);
    assert_int_equal(ds_ckpt_expect(ck, "stage0/params", DS_F32, 1001, &err), 0);
    ds_ckpt_close(ck);

    /* Saving the step `latest` names again is refused on every rank. */
    assert_int_equal(save_sequential(f->dir, 20, 2, f->arrays, f->n, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "step-20 is the latest checkpoint"));
    /* Re-saving an older step with another world size replaces it cleanly. */
    if (save_sequential(f->dir, 10, 3, f->arrays, f->n, NULL, &err)) fail_msg("save: %s", err.msg);
    ck = open_ok(path);
    assert_int_equal(ds_ckpt_world(ck), 3);
    char old_shard[4300];
    snprintf(old_shard, sizeof old_shard, "%s/rank-1-of-2.bin", path);
    assert_int_equal(access(old_shard, F_OK), -1); /* the W=2 shards were removed */
    assert_int_equal(ds_ckpt_expect(ck, "stage0/params", DS_F32, 999, &err), 0);
    assert_int_equal(ds_ckpt_verify(ck, &err), 0);
    ds_ckpt_close(ck);
}

static void test_mismatch_named(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    if (save_sequential(f->dir, 5, 2, f->arrays, f->n, NULL, &err)) fail_msg("save: %s", err.msg);
    ds_ckpt *ck = open_ok(f->dir);
    assert_int_equal(ds_ckpt_expect(ck, "stage0/params", DS_BF16, 1001, &err), -1);
    assert_non_null(strstr(err.msg, "meta.json: array 'stage0/params' is fp32 x 1001, this run "
                                    "expects bf16 x 1001"));
    assert_int_equal(ds_ckpt_expect(ck, "stage0/params", DS_F32, 1002, &err), -1);
    assert_non_null(strstr(err.msg, "expects fp32 x 1002"));
    assert_int_equal(ds_ckpt_expect(ck, "stage9/params", DS_F32, 1, &err), -1);
    assert_non_null(strstr(err.msg, "meta.json: no array 'stage9/params'"));
    float x;
    assert_int_equal(ds_ckpt_read_range(ck, "nope", 0, 1, &x, &err), -1);
    ds_ckpt_close(ck);
}

static void test_bad_saves_refused(void **state) {
    fixture *f = *state;
    ds_err err = {""};
    float data[8] = {0};
    /* Overlap across ranks: rank 0's checks name both files. */
    ds_ckpt_writer *w1 = ds_ckpt_writer_begin(f->dir, 1, 1, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w1, "x", DS_F32, 8, 2, 8, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w1, NULL, NULL, NULL, &err), 0);
    ds_ckpt_writer *w0 = ds_ckpt_writer_begin(f->dir, 1, 0, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 4, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w0, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "array 'x': elements [2,4) saved twice"));
    assert_non_null(strstr(err.msg, "rank-0-of-2.bin"));
    assert_non_null(strstr(err.msg, "rank-1-of-2.bin"));

    /* A gap. */
    w1 = ds_ckpt_writer_begin(f->dir, 2, 1, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w1, "x", DS_F32, 8, 5, 8, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w1, NULL, NULL, NULL, &err), 0);
    w0 = ds_ckpt_writer_begin(f->dir, 2, 0, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 4, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w0, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "elements [4,5) saved by no shard"));

    /* Disagreeing dtypes. */
    w1 = ds_ckpt_writer_begin(f->dir, 3, 1, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w1, "x", DS_I32, 8, 4, 8, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w1, NULL, NULL, NULL, &err), 0);
    w0 = ds_ckpt_writer_begin(f->dir, 3, 0, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 4, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w0, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "says fp32 x 8"));
    assert_non_null(strstr(err.msg, "says int32 x 8"));

    /* A missing shard: rank 1 never saved step 4. */
    w0 = ds_ckpt_writer_begin(f->dir, 4, 0, 2, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 8, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_commit(w0, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "rank-1-of-2.bin: missing shard"));

    /* Misuse on one rank is kept and reported again by commit. */
    w0 = ds_ckpt_writer_begin(f->dir, 5, 0, 1, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "bad name!", DS_F32, 8, 0, 8, data, &err), -1);
    assert_non_null(strstr(err.msg, "bad array name"));
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 9, data, &err), -1);
    assert_non_null(strstr(err.msg, "bad array name")); /* still the first error */
    assert_int_equal(ds_ckpt_writer_commit(w0, NULL, NULL, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "bad array name"));
    w0 = ds_ckpt_writer_begin(f->dir, 5, 0, 1, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 9, data, &err), -1);
    assert_non_null(strstr(err.msg, "range [0,9) outside [0,8)"));
    ds_ckpt_writer_abort(w0);
    w0 = ds_ckpt_writer_begin(f->dir, 5, 0, 1, &err);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 8, data, &err), 0);
    assert_int_equal(ds_ckpt_writer_add(w0, "x", DS_F32, 8, 0, 8, data, &err), -1);
    assert_non_null(strstr(err.msg, "added twice"));
    ds_ckpt_writer_abort(w0);
    assert_null(ds_ckpt_writer_begin(f->dir, 5, 2, 2, &err));
    assert_null(ds_ckpt_writer_begin(f->dir, -1, 0, 2, &err));

    /* None of these became `latest`. */
    char name[64];
    assert_int_equal(ds_ckpt_latest(f->dir, name, sizeof name, &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_reshard_4_to_2_and_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_any_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_engine_state_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_latest_and_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mismatch_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_saves_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
