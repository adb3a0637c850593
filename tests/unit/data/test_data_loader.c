/* The loader: windows are (input, target) shifted by one, deterministic from (seed, step,
 * micro), and the global batch is the same at world sizes 1, 2 and 4. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_test_util.h"
#include "loader.h"

enum { NTOK = 5000, T = 16, GLOBAL = 8 };

/* Token i is i % 257, so every window's content tells where it starts. */
static const char *make_corpus(void) {
    static uint32_t toks[NTOK];
    for (int i = 0; i < NTOK; i++) toks[i] = (uint32_t)(i % 257);
    const char *p = scratch_path("corpus.tok");
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_write(p, toks, NTOK, 2, 257, &err), 0);
    return p;
}

static void open_loader(ds_loader *ld, const char *path, int batch, int rank, int world,
                        uint64_t seed) {
    ds_loader_opts o = {.path = path, .context = T, .batch = batch, .seed = seed,
                        .rank = rank, .world_size = world, .validate = 1};
    ds_err err = {{0}};
    if (ds_loader_open(ld, &o, &err) != 0) fail_msg("%s", err.msg);
}

/* The global batch of (step, micro) as the concatenation of every rank's slice. */
static void global_batch(const char *path, int world, uint64_t seed, int64_t step,
                         int64_t micro, int32_t *x, int32_t *y) {
    int b = GLOBAL / world;
    for (int r = 0; r < world; r++) {
        ds_loader ld;
        open_loader(&ld, path, b, r, world, seed);
        ds_err err = {{0}};
        assert_int_equal(ds_loader_batch(&ld, step, micro, x + r * b * T, y + r * b * T, &err), 0);
        ds_loader_close(&ld);
    }
}

static void test_windows(void **state) {
    (void)state;
    const char *p = make_corpus();
    ds_loader ld;
    open_loader(&ld, p, GLOBAL, 0, 1, 42);
    assert_int_equal(ld.vocab, 257);
    assert_int_equal(ld.nstarts, NTOK - T);
    int32_t x[GLOBAL * T], y[GLOBAL * T];
    ds_err err = {{0}};
    assert_int_equal(ds_loader_batch(&ld, 3, 1, x, y, &err), 0);
    for (int b = 0; b < GLOBAL; b++) {
        uint64_t s = ds_loader_window_start(&ld, 3, 1, (uint64_t)b);
        assert_true(s + T < NTOK);
        for (int t = 0; t < T; t++) {
            assert_int_equal(x[b * T + t], (int32_t)((s + t) % 257));
            assert_int_equal(y[b * T + t], (int32_t)((s + t + 1) % 257));
        }
    }
    ds_loader_close(&ld);
}

static void test_determinism(void **state) {
    (void)state;
    const char *p = make_corpus();
    int32_t x1[GLOBAL * T], y1[GLOBAL * T], x2[GLOBAL * T], y2[GLOBAL * T];
    global_batch(p, 1, 7, 5, 0, x1, y1);
    global_batch(p, 1, 7, 5, 0, x2, y2);
    assert_memory_equal(x1, x2, sizeof x1);
    assert_memory_equal(y1, y2, sizeof y1);
    /* Another step, micro-step or seed draws other windows. */
    global_batch(p, 1, 7, 6, 0, x2, y2);
    assert_memory_not_equal(x1, x2, sizeof x1);
    global_batch(p, 1, 7, 5, 1, x2, y2);
    assert_memory_not_equal(x1, x2, sizeof x1);
    global_batch(p, 1, 8, 5, 0, x2, y2);
    assert_memory_not_equal(x1, x2, sizeof x1);
}

static void test_world_size_invariance(void **state) {
    (void)state;
    const char *p = make_corpus();
    int32_t x1[GLOBAL * T], y1[GLOBAL * T], xw[GLOBAL * T], yw[GLOBAL * T];
    for (int64_t step = 0; step < 4; step++)
        for (int64_t micro = 0; micro < 3; micro++) {
            global_batch(p, 1, 1234, step, micro, x1, y1);
            for (int world = 2; world <= 4; world *= 2) {
                global_batch(p, world, 1234, step, micro, xw, yw);
                assert_memory_equal(x1, xw, sizeof x1);
                assert_memory_equal(y1, yw, sizeof y1);
            }
        }
}

/* Starts spread over the whole file: every eighth of it gets some of 4000 windows. */
static void test_coverage(void **state) {
    (void)state;
    const char *p = make_corpus();
    ds_loader ld;
    open_loader(&ld, p, 1, 0, 1, 99);
    int bins[8] = {0};
    for (uint64_t g = 0; g < 4000; g++) {
        uint64_t s = ds_loader_window_start(&ld, g / 8, 0, g % 8);
        assert_true(s < ld.nstarts);
        bins[s * 8 / ld.nstarts]++;
    }
    for (int i = 0; i < 8; i++) assert_in_range(bins[i], 400, 600);
    ds_loader_close(&ld);
}

/* 4-byte tokens and the smallest file: N = T + 1 has exactly one window. */
static void test_one_window_wide(void **state) {
    (void)state;
    uint32_t toks[T + 1];
    for (int i = 0; i <= T; i++) toks[i] = 100000u + (uint32_t)i;
    const char *p = scratch_path("wide.tok");
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_write(p, toks, T + 1, 4, 0, &err), 0);
    ds_loader ld;
    open_loader(&ld, p, 3, 0, 1, 11);
    assert_int_equal(ld.vocab, 0);
    int32_t x[3 * T], y[3 * T];
    assert_int_equal(ds_loader_batch(&ld, 9, 2, x, y, &err), 0);
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < T; t++) {
            assert_int_equal(x[b * T + t], 100000 + t);
            assert_int_equal(y[b * T + t], 100001 + t);
        }
    ds_loader_close(&ld);
}

static void refuse_open(ds_loader_opts o, const char *msg) {
    ds_loader ld;
    ds_err err = {{0}};
    assert_int_equal(ds_loader_open(&ld, &o, &err), -1);
    if (!strstr(err.msg, msg)) fail_msg("expected \"%s\", got \"%s\"", msg, err.msg);
}

static void test_refusals(void **state) {
    (void)state;
    const char *p = make_corpus();
    ds_loader_opts o = {.path = p, .context = T, .batch = 2, .world_size = 1, .validate = 1};
    ds_loader_opts bad = o;
    bad.context = 0;
    refuse_open(bad, "context 0");
    bad = o, bad.batch = 0;
    refuse_open(bad, "batch 0");
    bad = o, bad.rank = 2, bad.world_size = 2;
    refuse_open(bad, "rank 2 outside the world of 2");
    bad = o, bad.context = NTOK;
    refuse_open(bad, "too few for one window of context 5000 (needs 5001)");
    bad = o, bad.vocab = 100;
    refuse_open(bad, "the file's vocab 257 is larger than the model's 100");
    bad = o, bad.path = scratch_path("nope.tok");
    refuse_open(bad, "nope.tok: cannot open token file");
    /* A token out of range: refused at open when validating, at the batch otherwise. */
    uint32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = i == 30 ? 5000 : 1;
    const char *q = scratch_path("oov.tok");
    ds_err err = {{0}};
    assert_int_equal(ds_tokfile_write(q, toks, 40, 2, 0, &err), 0);
    bad = o, bad.path = q, bad.vocab = 257, bad.context = 39, bad.batch = 1;
    refuse_open(bad, "oov.tok: token 5000 at index 30 is out of range for vocab 257");
    bad.validate = 0;
    ds_loader ld;
    assert_int_equal(ds_loader_open(&ld, &bad, &err), 0);
    int32_t x[39], y[39];
    assert_int_equal(ds_loader_batch(&ld, 0, 0, x, y, &err), -1);
    assert_non_null(strstr(err.msg, "token 5000 at index 30"));
    assert_int_equal(ds_loader_batch(&ld, -1, 0, x, y, &err), -1);
    ds_loader_close(&ld);
    /* Model vocab larger than the file's is fine (a padded embedding). */
    bad = o, bad.vocab = 50304;
    assert_int_equal(ds_loader_open(&ld, &bad, &err), 0);
    assert_int_equal(ld.vocab, 50304);
    ds_loader_close(&ld);
}

static int teardown(void **state) {
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_windows),      cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_world_size_invariance), cmocka_unit_test(test_coverage),
        cmocka_unit_test(test_refusals),     cmocka_unit_test(test_one_window_wide),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
