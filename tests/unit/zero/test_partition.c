/* ZeRO's even, padded split of a flat buffer and its per-parameter intersections. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "partition.h"

static ds_partition make(int64_t n, int world) {
    ds_partition p;
    ds_err err = {{0}};
    assert_int_equal(ds_partition_make(n, world, &p, &err), 0);
    return p;
}

static void test_15_over_2(void **state) {
    (void)state;
    ds_partition p = make(15, 2);
    assert_int_equal(p.shard, 8);
    assert_int_equal(p.padded, 16); /* one element of padding */
    assert_int_equal(ds_partition_begin(&p, 0), 0);
    assert_int_equal(ds_partition_begin(&p, 1), 8);
    assert_int_equal(ds_partition_real(&p, 0), 8);
    assert_int_equal(ds_partition_real(&p, 1), 7);
    assert_int_equal(ds_partition_owner(&p, 7), 0);
    assert_int_equal(ds_partition_owner(&p, 8), 1);
    assert_int_equal(ds_partition_owner(&p, 14), 1);
}

static void test_even_split(void **state) {
    (void)state;
    ds_partition p = make(12, 4);
    assert_int_equal(p.shard, 3);
    assert_int_equal(p.padded, 12);
    for (int r = 0; r < 4; r++) assert_int_equal(ds_partition_real(&p, r), 3);
}

static void test_more_ranks_than_elements(void **state) {
    (void)state;
    ds_partition p = make(3, 8);
    assert_int_equal(p.shard, 1);
    assert_int_equal(p.padded, 8);
    int64_t total = 0;
    for (int r = 0; r < 8; r++) {
        int64_t real = ds_partition_real(&p, r);
        assert_int_equal(real, r < 3 ? 1 : 0);
        total += real;
    }
    assert_int_equal(total, 3);
    /* a rank holding only padding intersects nothing */
    ds_shard_slice s = ds_partition_intersect(&p, 5, 0, 3);
    assert_int_equal(s.len, 0);
}

static void test_zero_elements(void **state) {
    (void)state;
    ds_partition p = make(0, 4);
    assert_int_equal(p.shard, 0);
    assert_int_equal(p.padded, 0);
    for (int r = 0; r < 4; r++) {
        assert_int_equal(ds_partition_real(&p, r), 0);
        assert_int_equal(ds_partition_intersect(&p, r, 0, 0).len, 0);
    }
}

static void test_world_of_one(void **state) {
    (void)state;
    ds_partition p = make(15, 1);
    assert_int_equal(p.shard, 15);
    assert_int_equal(p.padded, 15);
    ds_shard_slice s = ds_partition_intersect(&p, 0, 4, 6);
    assert_int_equal(s.flat_off, 4);
    assert_int_equal(s.shard_off, 4);
    assert_int_equal(s.range_off, 0);
    assert_int_equal(s.len, 6);
}

/* Parameters of 5, 6 and 4 elements laid out in a flat buffer of 15 over 2 ranks
 * (shard 8): rank 0 owns [0, 8), rank 1 owns [8, 15) plus one padding element. */
static void test_intersections(void **state) {
    (void)state;
    ds_partition p = make(15, 2);
    const int64_t off[3] = {0, 5, 11}, len[3] = {5, 6, 4};

    ds_shard_slice a = ds_partition_intersect(&p, 0, off[0], len[0]);
    assert_int_equal(a.flat_off, 0);
    assert_int_equal(a.shard_off, 0);
    assert_int_equal(a.range_off, 0);
    assert_int_equal(a.len, 5);

    ds_shard_slice b0 = ds_partition_intersect(&p, 0, off[1], len[1]); /* split param */
    assert_int_equal(b0.flat_off, 5);
    assert_int_equal(b0.shard_off, 5);
    assert_int_equal(b0.range_off, 0);
    assert_int_equal(b0.len, 3);
    ds_shard_slice b1 = ds_partition_intersect(&p, 1, off[1], len[1]);
    assert_int_equal(b1.flat_off, 8);
    assert_int_equal(b1.shard_off, 0);
    assert_int_equal(b1.range_off, 3);
    assert_int_equal(b1.len, 3);

    assert_int_equal(ds_partition_intersect(&p, 0, off[2], len[2]).len, 0);
    ds_shard_slice c = ds_partition_intersect(&p, 1, off[2], len[2]);
    assert_int_equal(c.shard_off, 3);
    assert_int_equal(c.len, 4);
    assert_int_equal(ds_partition_intersect(&p, 1, off[0], len[0]).len, 0);

    /* every element of every parameter is covered exactly once over all ranks */
    int covered[15];
    memset(covered, 0, sizeof covered);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) {
            ds_shard_slice s = ds_partition_intersect(&p, r, off[k], len[k]);
            for (int64_t i = 0; i < s.len; i++) covered[s.flat_off + i]++;
        }
    for (int i = 0; i < 15; i++) assert_int_equal(covered[i], 1);

    /* a range reaching into the padding is clipped to the real elements */
    ds_shard_slice pad = ds_partition_intersect(&p, 1, 10, 10);
    assert_int_equal(pad.len, 5);
    assert_int_equal(ds_partition_intersect(&p, 1, 15, 1).len, 0);
}

static void test_bad_input(void **state) {
    (void)state;
    ds_partition p;
    ds_err err = {{0}};
    assert_int_equal(ds_partition_make(-1, 2, &p, &err), -1);
    assert_non_null(strstr(err.msg, "negative"));
    assert_int_equal(ds_partition_make(10, 0, &p, &err), -1);
    assert_non_null(strstr(err.msg, "world size 0"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_15_over_2),     cmocka_unit_test(test_even_split),
        cmocka_unit_test(test_more_ranks_than_elements),
        cmocka_unit_test(test_zero_elements), cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_intersections), cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
