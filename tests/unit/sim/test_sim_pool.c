/* The device memory sub-allocator (kernels/device_pool): alignment, best fit, splitting
 * and coalescing, the two-step free (a retired block is never handed out until it is
 * reclaimed), and its counts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "device_pool.h"

static size_t take(ds_pool *p, size_t bytes) {
    size_t off = 0;
    assert_int_equal(ds_pool_alloc(p, bytes, &off, NULL), 0);
    return off;
}

static void give_back(ds_pool *p, size_t off) {
    assert_int_equal(ds_pool_retire(p, off, NULL), 0);
    assert_int_equal(ds_pool_reclaim(p, off), 0);
}

static void test_aligned_and_tiled(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(1 << 20, 256, 0);
    size_t a = take(p, 1), b = take(p, 300), c = take(p, 0);
    assert_int_equal(a, 0);
    assert_int_equal(b, 256); /* 1 byte spans one aligned unit */
    assert_int_equal(c, 256 + 512);
    ds_pool_stats st;
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.in_use, 301);
    assert_int_equal(st.live, 256 + 512 + 256);
    assert_int_equal(st.free, (1 << 20) - st.live);
    assert_int_equal(st.extent, 1024);
    assert_int_equal(st.live_blocks, 3);
    ds_pool_destroy(p);
}

/* The smallest hole that fits is used, not the first, and not the large tail. */
static void test_best_fit(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(1 << 20, 256, 0);
    size_t a = take(p, 4096), b = take(p, 256), c = take(p, 1024), d = take(p, 256);
    (void)b, (void)d;
    give_back(p, a); /* a 4096 hole */
    give_back(p, c); /* a 1024 hole */
    assert_int_equal(take(p, 1000), c);
    assert_int_equal(take(p, 2000), a);
    ds_pool_destroy(p);
}

/* Freed neighbours merge in either order, so the whole range is one block again. */
static void test_coalescing(void **state) {
    (void)state;
    size_t size = 16 * 256;
    ds_pool *p = ds_pool_new(size, 256, 0);
    size_t o[16];
    for (int i = 0; i < 16; i++) o[i] = take(p, 256);
    size_t off;
    assert_int_equal(ds_pool_alloc(p, 1, &off, NULL), -1); /* full */
    int order[16] = {3, 5, 4, 0, 15, 1, 2, 14, 6, 8, 7, 10, 9, 12, 11, 13};
    for (int i = 0; i < 16; i++) give_back(p, o[order[i]]);
    ds_pool_stats st;
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.largest_free, size);
    assert_int_equal(st.free, size);
    assert_int_equal(take(p, size), 0);
    ds_pool_destroy(p);
}

/* A retired block stays out of reach (and does not coalesce) until reclaimed. */
static void test_retired_not_reused(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(4 * 256, 256, 0);
    size_t a = take(p, 256), b = take(p, 256), c = take(p, 512);
    (void)c;
    size_t asked = 0, off;
    assert_int_equal(ds_pool_retire(p, a, &asked), 0);
    assert_int_equal(asked, 256);
    assert_int_equal(ds_pool_retire(p, b, NULL), 0);
    ds_pool_stats st;
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.in_use, 512);
    assert_int_equal(st.retired, 512);
    assert_int_equal(st.free, 0);
    assert_int_equal(ds_pool_alloc(p, 1, &off, NULL), -1);
    ds_pool_block blk;
    assert_int_equal(ds_pool_find(p, a + 10, &blk), 0);
    assert_int_equal(blk.state, DS_POOL_RETIRED);
    assert_int_equal(ds_pool_reclaim(p, b), 0);
    assert_int_equal(take(p, 256), b);
    assert_int_equal(ds_pool_reclaim(p, a), 0);
    assert_int_equal(take(p, 200), a);
    ds_pool_destroy(p);
}

static void test_bad_frees(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(1 << 16, 256, 0);
    size_t a = take(p, 1000);
    assert_int_equal(ds_pool_retire(p, a + 256, NULL), -1); /* inside the block */
    assert_int_equal(ds_pool_reclaim(p, a), -1);            /* not retired */
    assert_int_equal(ds_pool_retire(p, a, NULL), 0);
    assert_int_equal(ds_pool_retire(p, a, NULL), -1); /* twice */
    assert_int_equal(ds_pool_retire(p, 1 << 20, NULL), -1);
    assert_int_equal(ds_pool_reclaim(p, a), 0);
    assert_int_equal(ds_pool_reclaim(p, a), -1);
    ds_pool_destroy(p);
}

/* find tells the block and its state for any offset; asked is kept for checks. */
static void test_find(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(1 << 16, 256, 0);
    size_t a = take(p, 100), b = take(p, 700);
    ds_pool_block blk;
    assert_int_equal(ds_pool_find(p, b + 699, &blk), 0);
    assert_int_equal(blk.off, b);
    assert_int_equal(blk.size, 768);
    assert_int_equal(blk.asked, 700);
    assert_int_equal(blk.state, DS_POOL_LIVE);
    assert_int_equal(ds_pool_find(p, a + 200, &blk), 0); /* the padding is a's */
    assert_int_equal(blk.off, a);
    assert_int_equal(ds_pool_find(p, b + 768, &blk), 0);
    assert_int_equal(blk.state, DS_POOL_FREE);
    assert_int_equal(ds_pool_find(p, 1 << 16, &blk), -1);
    ds_pool_destroy(p);
}

/* A guard makes every block span that much past what it asked for. */
static void test_guard(void **state) {
    (void)state;
    ds_pool *p = ds_pool_new(1 << 16, 256, 256);
    size_t span = 0, a = 0;
    assert_int_equal(ds_pool_alloc(p, 256, &a, &span), 0);
    assert_int_equal(span, 512);
    assert_int_equal(take(p, 1), 512);
    ds_pool_stats st;
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.in_use, 257);
    size_t off;
    assert_int_equal(ds_pool_alloc(p, 1 << 16, &off, NULL), -1);
    ds_pool_destroy(p);
}

/* Many random allocations and frees: the counts stay consistent with a model. */
static void test_random_workload(void **state) {
    (void)state;
    enum { SLOTS = 200 };
    ds_pool *p = ds_pool_new(1 << 22, 256, 0);
    size_t off[SLOTS], asked[SLOTS];
    int live[SLOTS] = {0};
    uint64_t x = 12345;
    size_t in_use = 0;
    for (int step = 0; step < 20000; step++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int i = (int)(x % SLOTS);
        if (live[i]) {
            give_back(p, off[i]);
            in_use -= asked[i];
            live[i] = 0;
        } else {
            asked[i] = (size_t)(x >> 20) % 40000;
            if (ds_pool_alloc(p, asked[i], &off[i], NULL) == 0) {
                assert_int_equal(off[i] % 256, 0);
                live[i] = 1;
                in_use += asked[i];
            }
        }
    }
    ds_pool_stats st;
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.in_use, in_use);
    for (int i = 0; i < SLOTS; i++)
        if (live[i]) give_back(p, off[i]);
    ds_pool_stats_get(p, &st);
    assert_int_equal(st.free, 1 << 22);
    assert_int_equal(st.largest_free, 1 << 22);
    assert_int_equal(st.extent, 0);
    ds_pool_destroy(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aligned_and_tiled),  cmocka_unit_test(test_best_fit),
        cmocka_unit_test(test_coalescing),         cmocka_unit_test(test_retired_not_reused),
        cmocka_unit_test(test_bad_frees),          cmocka_unit_test(test_find),
        cmocka_unit_test(test_guard),              cmocka_unit_test(test_random_workload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
