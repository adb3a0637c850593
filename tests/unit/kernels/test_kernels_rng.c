/* Philox-4x32-10 against the published known answers (Random123's kat_vectors), and the
 * dropout kernel's contract: the mask is a pure function of (key, element index); the fused
 * Residual add (dropout_add_forward) has the bits of dropout then add. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"
#include "kernels_testutil.h"

static void test_philox_known_answers(void **state) {
    (void)state;
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        ds_philox4x32(out, kat[i], kat[i] + 4);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], kat[i][6 + j]);
    }
}

static size_t count_dropped(const float *out, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += out[i] == 0.0f;
    return k;
}

static void test_dropout_rate_and_scale(void **state) {
    (void)state;
    size_t n = 1000003;
    float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int k = 0; k < 3; k++) {
        ds_rng_key key = {12345, 7, 3, 1, 0};
        float *out = tu_dropout_of_ones(n, ps[k], key);
        double rate = (double)count_dropped(out, n) / n;
        double sigma = sqrt(ps[k] * (1 - ps[k]) / n);
        assert_true(fabs(rate - ps[k]) < 6 * sigma);
        float kept = 1.0f / (1.0f - ps[k]);
        for (size_t i = 0; i < n; i++) assert_true(out[i] == 0.0f || out[i] == kept);
        free(out);
    }
}

static void test_dropout_same_key_same_mask(void **state) {
    (void)state;
    size_t n = 100001;
    ds_rng_key key = {0xDEADBEEFCAFEull, 11, 2, 0, 0};
    float *a = tu_dropout_of_ones(n, 0.3f, key), *b = tu_dropout_of_ones(n, 0.3f, key);
    assert_memory_equal(a, b, n * sizeof(float));
    ds_kernels_set_threads(1);
    float *c = tu_dropout_of_ones(n, 0.3f, key);
    ds_kernels_set_threads(0);
    assert_memory_equal(a, c, n * sizeof(float));
    /* a prefix of a longer tensor draws the same mask as the short tensor */
    float *d = tu_dropout_of_ones(1000, 0.3f, key);
    assert_memory_equal(a, d, 1000 * sizeof(float));
    free(a), free(b), free(c), free(d);
}

static void test_dropout_different_keys_differ(void **state) {
    (void)state;
    size_t n = 4096;
    ds_rng_key base = {42, 1, 1, 1, 0};
    ds_rng_key keys[5] = {base, base, base, base, base};
    keys[1].seed = 43 | (1ull << 40);
    keys[2].step = 2;
    keys[3].layer = 2;
    keys[4].micro = 2;
    float *m[5];
    for (int i = 0; i < 5; i++) m[i] = tu_dropout_of_ones(n, 0.5f, keys[i]);
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++) {
            size_t same = 0;
            for (size_t e = 0; e < n; e++) same += (m[i][e] == 0) == (m[j][e] == 0);
            /* independent masks agree on about half the elements */
            assert_true(same > n * 0.4 && same < n * 0.6);
        }
    /* seeds differing only in the high word differ too */
    ds_rng_key hi = base;
    hi.seed = 42 | (1ull << 33);
    float *h = tu_dropout_of_ones(n, 0.5f, hi);
    assert_memory_not_equal(h, m[0], n * sizeof(float));
    for (int i = 0; i < 5; i++) free(m[i]);
    free(h);
}

/* The documented keying, which the CUDA backend must reproduce: element i keeps iff word
 * i%4 of philox({i/4, step, layer, micro}, {seed lo, seed hi}) >= p * 2^32. */
static void test_dropout_keying_contract(void **state) {
    (void)state;
    size_t n = 1001;
    float p = 0.25f;
    ds_rng_key key = {0x0123456789ABCDEFull, 5, 6, 7, 0};
    float *out = tu_dropout_of_ones(n, p, key);
    uint32_t k[2] = {0x89ABCDEFu, 0x01234567u};
    for (size_t i = 0; i < n; i++) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), 5, 6, 7}, r[4];
        ds_philox4x32(r, ctr, k);
        int keep = r[i % 4] >= (uint32_t)(p * 4294967296.0);
        assert_int_equal(keep, out[i] != 0.0f);
    }
    free(out);
}

static void test_dropout_backward(void **state) {
    (void)state;
    tu_seed(21);
    size_t n = 70001;
    float p = 0.2f;
    ds_rng_key key = {9, 8, 7, 6, 0};
    float *inp = tu_randf(n, 0.5f, 1.0f), *out = malloc(n * sizeof(float));
    float *dout = tu_randf(n, -1, 1), *base = tu_randf(n, -1, 1), *dinp = tu_copyf(base, n);
    ds_dropout_forward(out, inp, n, p, key);
    ds_dropout_backward(dinp, 1, dout, n, p, key);
    float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) {
        if (out[i] == 0.0f) {
            assert_true(dinp[i] == base[i]);
        } else {
            assert_true(out[i] == inp[i] * scale);
            assert_true(dinp[i] == base[i] + dout[i] * scale);
        }
    }
    /* p = 0 is the identity (forward) and a plain accumulate (backward) */
    ds_dropout_forward(out, inp, n, 0.0f, key);
    assert_memory_equal(out, inp, n * sizeof(float));
    float *d0 = tu_copyf(base, n);
    ds_dropout_backward(d0, 1, dout, n, 0.0f, key);
    for (size_t i = 0; i < n; i++) assert_true(d0[i] == base[i] + dout[i]);
    free(inp), free(out), free(dout), free(base), free(dinp), free(d0);
}

/* key.offset shifts the element index: a slice [k, n) with offset k draws what the
 * whole tensor draws there, for offsets inside a Philox block too. */
static void test_dropout_offset(void **state) {
    (void)state;
    size_t n = 1031;
    ds_rng_key key = {0xABCDEF01234ull, 9, 5, 2, 0};
    float *whole = tu_dropout_of_ones(n, 0.3f, key);
    size_t offs[4] = {1, 2, 4, 517};
    for (int k = 0; k < 4; k++) {
        key.offset = offs[k];
        float *part = tu_dropout_of_ones(n - offs[k], 0.3f, key);
        assert_memory_equal(part, whole + offs[k], (n - offs[k]) * sizeof *part);
        free(part);
    }
    free(whole);
}

/* The fused Residual add: x + dropout(f) is dropout_forward then add_forward, bit for
 * bit, with a key offset inside a Philox block and at p = 0. */
static void test_dropout_add_forward(void **state) {
    (void)state;
    tu_seed(23);
    size_t n = 70001;
    const float ps[] = {0.1f, 0.0f};
    float *x = tu_randf(n, -1, 1), *f = tu_randf(n, -2, 2);
    float *y = malloc(n * sizeof *y), *want = malloc(n * sizeof *want);
    float *got = malloc(n * sizeof *got);
    for (int k = 0; k < 2; k++) {
        ds_rng_key key = {0x5EED0001ull, 3, 11, 2, 4097};
        ds_dropout_forward(y, f, n, ps[k], key);
        ds_add_forward(want, x, y, n);
        ds_dropout_add_forward(got, x, f, n, ps[k], key);
        assert_memory_equal(got, want, n * sizeof *got);
    }
    free(x), free(f), free(y), free(want), free(got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_dropout_rate_and_scale),
        cmocka_unit_test(test_dropout_same_key_same_mask),
        cmocka_unit_test(test_dropout_different_keys_differ),
        cmocka_unit_test(test_dropout_keying_contract),
        cmocka_unit_test(test_dropout_backward),
        cmocka_unit_test(test_dropout_offset),
        cmocka_unit_test(test_dropout_add_forward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
