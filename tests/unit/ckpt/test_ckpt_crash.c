/* Real ranks (forked processes, a pipe barrier) save together; a rank killed with SIGKILL
 * in the middle of its shard, or rank 0 killed before meta.json or before `latest`,
 * leaves the previous `latest` loadable and intact. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "ckpt_test_util.h"

#define NARR 3

typedef struct fixture {
    char *dir;
    test_array old[NARR], new[NARR];
} fixture;

static void make_arrays(test_array *a, uint32_t seed) {
    /* 1.5 M fp32 over 4 ranks: 1.5 MB per shard, so a kill after the first 1 MiB
     * write lands in the middle of a section. */
    test_array t[NARR] = {
        {"stage0/params", DS_F32, 1500001, 0, NULL},
        {"stage0/adam_m", DS_F32, 1001, 0, NULL},
        {"rng/state", DS_I32, 4, 1, NULL},
    };
    memcpy(a, t, sizeof t);
    for (int i = 0; i < NARR; i++) fill_array(&a[i], seed + (uint32_t)i);
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = make_scratch_dir();
    make_arrays(f->old, 1);
    make_arrays(f->new, 100);
    int st[4];
    if (save_forked(f->dir, 1, 4, f->old, NARR, NULL, st)) return -1;
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    rm_rf(f->dir);
    free(f->dir);
    free_arrays(f->old, NARR);
    free_arrays(f->new, NARR);
    free(f);
    return 0;
}

/* `path` opens as step `step` with exactly the contents of `a`, every checksum good. */
static void expect_checkpoint(const char *path, int64_t step, test_array *a) {
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(path, &err);
    if (!ck) fail_msg("open %s: %s", path, err.msg);
    assert_int_equal(ds_ckpt_step(ck), step);
    assert_int_equal(ds_ckpt_verify(ck, &err), 0);
    for (int i = 0; i < NARR; i++) {
        assert_int_equal(check_read_as(ck, &a[i], 4), 0);
        assert_int_equal(check_read_as(ck, &a[i], 1), 0);
    }
    assert_string_equal(ds_ckpt_meta_extra(ck), "{\"who\":\"forked\"}");
    ds_ckpt_close(ck);
}

static int exists(const fixture *f, const char *name) {
    char p[4400];
    snprintf(p, sizeof p, "%s/step-2/%s", f->dir, name);
    return access(p, F_OK) == 0;
}

static void test_forked_save(void **state) {
    fixture *f = *state;
    expect_checkpoint(f->dir, 1, f->old);
    int st[4];
    assert_int_equal(save_forked(f->dir, 2, 4, f->new, NARR, NULL, st), 0);
    expect_checkpoint(f->dir, 2, f->new);
}

static void test_rank_killed_mid_shard(void **state) {
    fixture *f = *state;
    int st[4];
    assert_int_equal(save_forked(f->dir, 2, 4, f->new, NARR, "2:1048576", st), -1);
    assert_true(WIFSIGNALED(st[2]) && WTERMSIG(st[2]) == SIGKILL);
    for (int r = 0; r < 4; r++)
        if (r != 2) assert_true(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 1);
    assert_true(exists(f, "rank-2-of-4.bin.tmp")); /* it really died mid-write */
    assert_false(exists(f, "rank-2-of-4.bin"));
    assert_false(exists(f, "meta.json"));
    expect_checkpoint(f->dir, 1, f->old);
    ds_err err = {""};
    char p[4400];
    snprintf(p, sizeof p, "%s/step-2", f->dir);
    assert_null(ds_ckpt_open(p, &err));
    /* The next attempt saves the same step over the leftovers. */
    assert_int_equal(save_forked(f->dir, 2, 4, f->new, NARR, NULL, st), 0);
    expect_checkpoint(f->dir, 2, f->new);
}

static void test_rank0_killed_before_meta(void **state) {
    fixture *f = *state;
    int st[4];
    assert_int_equal(save_forked(f->dir, 2, 4, f->new, NARR, "0:before-meta", st), -1);
    assert_true(WIFSIGNALED(st[0]) && WTERMSIG(st[0]) == SIGKILL);
    for (int r = 0; r < 4; r++) {
        char name[64];
        snprintf(name, sizeof name, "rank-%d-of-4.bin", r);
        assert_true(exists(f, name)); /* every shard was durable before meta.json */
    }
    assert_false(exists(f, "meta.json"));
    expect_checkpoint(f->dir, 1, f->old);
}

static void test_rank0_killed_before_latest(void **state) {
    fixture *f = *state;
    int st[4];
    assert_int_equal(save_forked(f->dir, 2, 4, f->new, NARR, "0:before-latest", st), -1);
    assert_true(WIFSIGNALED(st[0]) && WTERMSIG(st[0]) == SIGKILL);
    /* meta.json came before latest: the new step is complete, latest still the old one. */
    char p[4400];
    snprintf(p, sizeof p, "%s/step-2", f->dir);
    expect_checkpoint(p, 2, f->new);
    expect_checkpoint(f->dir, 1, f->old);
    char name[64];
    ds_err err = {""};
    assert_int_equal(ds_ckpt_latest(f->dir, name, sizeof name, &err), 1);
    assert_string_equal(name, "step-1");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN); /* the coordinator may write to a killed rank's pipe */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_forked_save, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank_killed_mid_shard, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank0_killed_before_meta, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rank0_killed_before_latest, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
