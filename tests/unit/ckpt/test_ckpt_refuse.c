/* Truncated, corrupted, foreign, missing and mismatched checkpoints are refused with a
 * message that names the file and what is wrong. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt_test_util.h"

typedef struct fixture {
    char *dir;
    char step[4200], meta[4300];
    test_array arrays[3];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = make_scratch_dir();
    test_array a[] = {
        {"stage0/params", DS_F32, 1001, 0, NULL},
        {"stage0/adam_v", DS_F32, 300000, 0, NULL},
        {"rng/state", DS_I32, 4, 1, NULL},
    };
    memcpy(f->arrays, a, sizeof a);
    for (int i = 0; i < 3; i++) fill_array(&f->arrays[i], (uint32_t)i + 7);
    ds_err err = {""};
    if (save_sequential(f->dir, 1, 4, f->arrays, 3, "{\"seed\":1}", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    snprintf(f->step, sizeof f->step, "%s/step-1", f->dir);
    snprintf(f->meta, sizeof f->meta, "%s/meta.json", f->step);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rm_rf(f->dir);
    free(f->dir);
    free_arrays(f->arrays, 3);
    free(f);
    return 0;
}

static void shard_path(const fixture *f, int rank, char *out, size_t cap) {
    snprintf(out, cap, "%s/rank-%d-of-4.bin", f->step, rank);
}

/* Opening fails and the message holds every fragment given. */
static void expect_refused(const char *path, const char *frag1, const char *frag2) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(path, &err);
    if (ck) {
        ds_ckpt_close(ck);
        fail_msg("opened %s, expected a refusal mentioning '%s'", path, frag1);
    }
    if (!strstr(err.msg, frag1) || (frag2 && !strstr(err.msg, frag2)))
        fail_msg("message '%s' lacks '%s' / '%s'", err.msg, frag1, frag2 ? frag2 : "");
}

static void corrupt_at(const char *path, long offset) {
    struct stat st;
    stat(path, &st);
    corrupt_byte(path, (long)st.st_size - offset);
}

static void test_truncated(void **state) {
    fixture *f = *state;
    char p[4400];
    shard_path(f, 2, p, sizeof p);
    truncate_by(p, 10);
    expect_refused(f->dir, "rank-2-of-4.bin: truncated", NULL);
    truncate(p, 40);
    expect_refused(f->dir, "rank-2-of-4.bin: truncated", "shorter than a header");
}

static void test_payload_bit_flip(void **state) {
    fixture *f = *state;
    char p[4400];
    shard_path(f, 1, p, sizeof p);
    corrupt_byte(p, 5); /* inside rank 1's last section: stage0/adam_v (sections keep add order) */
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(f->dir, &err);
    assert_non_null(ck); /* payloads are checked as they are read */
    assert_int_equal(check_read_as(ck, &f->arrays[0], 4), 0);
    float *buf = malloc(300000 * sizeof *buf);
    assert_int_equal(ds_ckpt_read_range(ck, "stage0/adam_v", 0, 300000, buf, &err), -1);
    assert_non_null(strstr(err.msg, "rank-1-of-4.bin: corrupted: section 'stage0/adam_v'"));
    assert_non_null(strstr(err.msg, "fail their checksum"));
    /* A range that avoids the damaged shard still reads. */
    assert_int_equal(ds_ckpt_read_range(ck, "stage0/adam_v", 0, 75000, buf, &err), 0);
    free(buf);
    assert_int_equal(ds_ckpt_verify(ck, &err), -1);
    assert_non_null(strstr(err.msg, "rank-1-of-4.bin: corrupted"));
    ds_ckpt_close(ck);
}

static void test_header_bit_flips(void **state) {
    fixture *f = *state;
    char p[4400];
    shard_path(f, 3, p, sizeof p);
    corrupt_at(p, 20);
    expect_refused(f->dir, "rank-3-of-4.bin: corrupted: file header fails its checksum", NULL);
    corrupt_at(p, 20); /* restored */
    corrupt_at(p, 64 + 30);
    expect_refused(f->dir, "rank-3-of-4.bin: corrupted: section header at byte 64", NULL);
    corrupt_at(p, 64 + 30);
    corrupt_at(p, 0);
    expect_refused(f->dir, "rank-3-of-4.bin: not a checkpoint shard", NULL);
    corrupt_at(p, 0);
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(f->dir, &err);
    assert_non_null(ck);
    assert_int_equal(ds_ckpt_verify(ck, &err), 0);
    ds_ckpt_close(ck);
}

static void test_missing_and_foreign_shard(void **state) {
    fixture *f = *state;
    char p[4400];
    shard_path(f, 3, p, sizeof p);
    /* A shard of another save at the same step and world size. */
    char *other = make_scratch_dir();
    fill_array(&f->arrays[0], 99);
    ds_err err = {""};
    assert_int_equal(save_sequential(other, 1, 4, f->arrays, 3, NULL, &err), 0);
    char q[4400];
    snprintf(q, sizeof q, "%s/step-1/rank-3-of-4.bin", other);
    assert_int_equal(rename(q, p), 0);
    expect_refused(f->dir, "rank-3-of-4.bin: not the shard meta.json describes", NULL);
    rm_rf(other);
    free(other);
    unlink(p);
    expect_refused(f->dir, "rank-3-of-4.bin: missing shard", NULL);
}

static void replace_in_meta(const fixture *f, const char *from, const char *to) {
    char *m = read_text(f->meta);
    char *at = strstr(m, from);
    assert_non_null(at);
    size_t n = strlen(m) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - m), m, to, at + strlen(from));
    write_text(f->meta, out);
    free(out);
    free(m);
}

static void test_meta_edits(void **state) {
    fixture *f = *state;
    char *orig = read_text(f->meta);
    struct { const char *from, *to, *frag; } cases[] = {
        {"\"numel\": 1001", "\"numel\": 1002", "array 'stage0/params' is fp32 x 1002, its shards hold fp32 x 1001"},
        {"\"dtype\": \"int32\"", "\"dtype\": \"fp32\"", "array 'rng/state' is fp32 x 4"},
        {"\"name\": \"rng/state\"", "\"name\": \"rng/other\"", "array 'rng/other' is in no shard"},
        {"\"seed\": 1", "\"seed\": 2", "\"engine\" fails its checksum"},
        {"\"world_size\": 4", "\"world_size\": 2", "4 shards listed for world size 2"},
        {"\"step\": 1", "\"step\": 2", "meta.json says rank 0 of 4, step 2"},
        {"\"file\": \"rank-1-of-4.bin\"", "\"file\": \"../../etc/passwd\"", "shards[1] is \"../../etc/passwd\""},
        {"\"version\": 1", "\"version\": 9", "\"version\" missing or not an integer"},
        {"\"format\": \"dslaunch-checkpoint\"", "\"format\": \"other\"", "format \"other\""},
        {"\"bytes\": ", "\"bytes\": 1", "not the shard meta.json describes"},
        {"{", "[", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_text(f->meta, orig);
        replace_in_meta(f, cases[i].from, cases[i].to);
        expect_refused(f->dir, "meta.json", NULL);
        expect_refused(f->dir, cases[i].frag, NULL);
    }
    write_text(f->meta, orig);
    free(orig);
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(f->dir, &err);
    assert_non_null(ck);
    ds_ckpt_close(ck);
}

static void test_bad_latest_and_paths(void **state) {
    fixture *f = *state;
    char latest[4300];
    snprintf(latest, sizeof latest, "%s/latest", f->dir);
    write_text(latest, "../../etc\n");
    expect_refused(f->dir, "latest: malformed", NULL);
    write_text(latest, "step-3\n");
    expect_refused(f->dir, "latest names step-3, which has no meta.json", NULL);
    unlink(latest);
    expect_refused(f->dir, "no checkpoint here", NULL);
    expect_refused("/nonexistent/ckpt", "/nonexistent/ckpt", NULL);
    unlink(f->meta);
    expect_refused(f->step, "no checkpoint here", NULL);
}

/* Opens path and reads everything; 0 only if all of it passed every check. */
static int open_and_verify(const char *path) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(path, &err);
    if (!ck) return -1;
    int rc = ds_ckpt_verify(ck, &err);
    ds_ckpt_close(ck);
    return rc;
}

/* Every single-byte change anywhere in a shard or in meta.json is caught, by the open
 * or by the verification; none crashes (the sanitizer build runs this too). */
static void test_every_byte_flip_detected(void **state) {
    (void)state;
    char *dir = make_scratch_dir();
    test_array a[] = {{"a", DS_F32, 37, 0, NULL}, {"b", DS_BF16, 5, 0, NULL},
                      {"c", DS_I32, 3, 1, NULL}};
    for (int i = 0; i < 3; i++) fill_array(&a[i], (uint32_t)i + 3);
    ds_err err = {""};
    assert_int_equal(save_sequential(dir, 1, 2, a, 3, "{\"seed\":[1,2.5]}", &err), 0);
    const char *files[] = {"rank-1-of-2.bin", "rank-0-of-2.bin", "meta.json"};
    for (int k = 0; k < 3; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/step-1/%s", dir, files[k]);
        struct stat st;
        assert_int_equal(stat(p, &st), 0);
        for (long off = 1; off <= st.st_size; off++) {
            corrupt_byte(p, off);
            if (open_and_verify(dir) == 0) fail_msg("%s: flip at %ld from the end passed", p, off);
            corrupt_byte(p, off);
        }
        assert_int_equal(open_and_verify(dir), 0);
    }
    free_arrays(a, 3);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_payload_bit_flip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_header_bit_flips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_and_foreign_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_meta_edits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_latest_and_paths, setup, teardown),
        cmocka_unit_test(test_every_byte_flip_detected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
