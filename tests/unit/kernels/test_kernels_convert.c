/* fp32 <-> bf16 / fp16: round to nearest even, NaN/Inf/denormals, exhaustive round trips,
 * and fp16 against the compiler's own _Float16 conversion on random floats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels.h"
#include "kernels_testutil.h"

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint16_t bf16_of(uint32_t bits) {
    float f = from_bits(bits);
    uint16_t h;
    ds_f32_to_bf16(&h, &f, 1);
    return h;
}

static uint16_t f16_of(float f) {
    uint16_t h;
    ds_f32_to_f16(&h, &f, 1);
    return h;
}

static void test_bf16_rounding(void **state) {
    (void)state;
    assert_int_equal(bf16_of(0x3F800000), 0x3F80); /* 1.0 */
    assert_int_equal(bf16_of(0x3F808000), 0x3F80); /* tie, even below */
    assert_int_equal(bf16_of(0x3F818000), 0x3F82); /* tie, odd below: up */
    assert_int_equal(bf16_of(0x3F808001), 0x3F81); /* above the tie */
    assert_int_equal(bf16_of(0x3F807FFF), 0x3F80);
    assert_int_equal(bf16_of(0xBF818000), 0xBF82); /* sign symmetric */
    assert_int_equal(bf16_of(0x80000000), 0x8000); /* -0 */
    assert_int_equal(bf16_of(0x7F800000), 0x7F80); /* inf */
    assert_int_equal(bf16_of(0xFF800000), 0xFF80);
    assert_int_equal(bf16_of(0x7F7FFFFF), 0x7F80); /* FLT_MAX rounds to inf */
    assert_int_equal(bf16_of(0x00018000), 0x0002); /* denormals round like the rest */
    assert_int_equal(bf16_of(0x00008000), 0x0000);
    /* NaNs stay NaN, including signalling ones whose payload sits in the low bits */
    uint32_t nans[4] = {0x7FC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF};
    for (int i = 0; i < 4; i++) {
        uint16_t h = bf16_of(nans[i]);
        assert_true((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0);
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
}

static void test_bf16_round_trip_exhaustive(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *f = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ds_bf16_to_f32(f, h, 65536);
    ds_f32_to_bf16(back, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        assert_int_equal(to_bits(f[i]), i << 16);
        int nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F);
        if (nan) assert_true(isnan(from_bits((uint32_t)back[i] << 16)));
        else assert_int_equal(back[i], i);
    }
    free(h), free(back), free(f);
}

static void test_f16_special_values(void **state) {
    (void)state;
    assert_int_equal(f16_of(1.0f), 0x3C00);
    assert_int_equal(f16_of(-2.0f), 0xC000);
    assert_int_equal(f16_of(0.0f), 0x0000);
    assert_int_equal(f16_of(-0.0f), 0x8000);
    assert_int_equal(f16_of(65504.0f), 0x7BFF);       /* largest half */
    assert_int_equal(f16_of(65519.0f), 0x7BFF);       /* below the tie */
    assert_int_equal(f16_of(65520.0f), 0x7C00);       /* tie rounds to even: inf */
    assert_int_equal(f16_of(1e10f), 0x7C00);
    assert_int_equal(f16_of(-INFINITY), 0xFC00);
    assert_int_equal(f16_of(ldexpf(1, -14)), 0x0400); /* smallest normal */
    assert_int_equal(f16_of(ldexpf(1, -24)), 0x0001); /* smallest denormal */
    assert_int_equal(f16_of(ldexpf(1, -25)), 0x0000); /* tie with zero: even */
    assert_int_equal(f16_of(ldexpf(1.0001f, -25)), 0x0001);
    assert_int_equal(f16_of(ldexpf(3, -25)), 0x0002); /* 1.5 ulp: tie, to even 2 */
    assert_int_equal(f16_of(ldexpf(1023.5f, -24)), 0x0400); /* denormal rounds up to normal */
    assert_int_equal(f16_of(1.0f + ldexpf(1, -11)), 0x3C00); /* tie, even below */
    assert_int_equal(f16_of(1.0f + 3 * ldexpf(1, -11)), 0x3C02);
    assert_int_equal(f16_of(from_bits(0x00000001)), 0x0000); /* fp32 denormal */
    uint32_t nans[3] = {0x7FC00000, 0x7F800001, 0xFFC01234};
    for (int i = 0; i < 3; i++) {
        uint16_t h = f16_of(from_bits(nans[i]));
        assert_true((h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0);
        assert_int_equal(h >> 15, nans[i] >> 31);
    }
}

static void test_f16_round_trip_exhaustive(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *f = malloc(65536 * 4);
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    ds_f16_to_f32(f, h, 65536);
    ds_f32_to_f16(back, f, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t e = (i >> 10) & 0x1F, m = i & 0x3FF;
        double want;
        if (e == 0x1F) want = m ? NAN : INFINITY;
        else if (e == 0) want = ldexp((double)m, -24);
        else want = ldexp(1.0 + m / 1024.0, (int)e - 15);
        if (i & 0x8000) want = -want;
        if (e == 0x1F && m) {
            assert_true(isnan(f[i]));
            assert_true(((back[i] & 0x7C00) == 0x7C00) && (back[i] & 0x3FF));
        } else {
            assert_true((double)f[i] == want);
            assert_int_equal(back[i], i);
        }
    }
    free(h), free(back), free(f);
}

/* gcc's _Float16 conversion (libgcc's soft-float or F16C) rounds to nearest even; both our
 * paths (bulk and element by element) must agree with it. */
static void test_f16_matches_compiler(void **state) {
    (void)state;
    tu_seed(41);
    size_t n = 1 << 20;
    float *x = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) { /* exponents across denormal, normal and overflow */
        uint32_t bits = (uint32_t)(tu_uniform() * 4294967296.0);
        uint32_t exp = 95 + (uint32_t)(tu_uniform() * 50); /* 2^-32 .. 2^17 */
        x[i] = from_bits((bits & 0x807FFFFFu) | (exp << 23));
    }
    ds_f32_to_f16(h, x, n - 3); /* bulk (hardware path where there is one) + a tail */
    for (size_t i = n - 3; i < n; i++) ds_f32_to_f16(h + i, x + i, 1);
    for (size_t i = 0; i < n; i++) {
        _Float16 r = (_Float16)x[i];
        uint16_t want, one;
        memcpy(&want, &r, 2);
        ds_f32_to_f16(&one, x + i, 1); /* the portable path, element by element */
        if (h[i] != want || one != want) {
            fprintf(stderr, "f16(%a = 0x%08x): got 0x%04x / 0x%04x want 0x%04x\n", x[i],
                    to_bits(x[i]), h[i], one, want);
            fail();
        }
    }
    free(x), free(h);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_round_trip_exhaustive),
        cmocka_unit_test(test_f16_special_values),
        cmocka_unit_test(test_f16_round_trip_exhaustive),
        cmocka_unit_test(test_f16_matches_compiler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
