/* fp32 <-> bf16 / fp16: round to nearest even, NaN/Inf/denormals, exhaustive round trips,
 * and fp16 against the compiler's own _Float16 conversion on random floats. The 16-bit
 * arithmetic (ds_half_*) against a scalar reference built on kernel_math.h's converters. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernel_math.h"
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

/* ---- 16-bit arithmetic (ds_half_*) ---- */

static float ref_widen(ds_half h, uint16_t x) {
    return h == DS_HALF_BF16 ? ds_km_bf16_to_f32(x) : ds_km_f16_to_f32(x);
}

static uint16_t ref_narrow(ds_half h, float f) {
    return h == DS_HALF_BF16 ? ds_km_f32_to_bf16(f) : ds_km_f32_to_f16(f);
}

/* Equal bits, except that any NaN matches any NaN: which operand's payload survives an
 * addition of two NaNs is the hardware's choice. */
static int same_half(ds_half h, uint16_t got, uint16_t want) {
    if (isnan(ref_widen(h, want))) return isnan(ref_widen(h, got));
    return got == want;
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Every bit pattern can come up: NaN, inf, subnormals, both zeros. */
static void random_half(uint16_t *x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) x[i] = (uint16_t)lcg(&seed);
}

#define HALF_N 1037 /* crosses the kernels' 512- and 1024-element blocks, a multiple of neither */

static void test_half_add_matches_reference(void **state) {
    (void)state;
    static const ds_half fmts[] = {DS_HALF_BF16, DS_HALF_F16};
    uint16_t a[HALF_N], b[HALF_N], out[HALF_N], want[HALF_N];
    for (int f = 0; f < 2; f++) {
        ds_half h = fmts[f];
        random_half(a, HALF_N, 11u + (uint32_t)f);
        random_half(b, HALF_N, 97u + (uint32_t)f);
        for (size_t i = 0; i < HALF_N; i++)
            want[i] = ref_narrow(h, ref_widen(h, a[i]) + ref_widen(h, b[i]));
        ds_half_add(h, out, a, b, HALF_N);
        for (size_t i = 0; i < HALF_N; i++)
            if (!same_half(h, out[i], want[i]))
                fail_msg("fmt %d i=%zu: %04x + %04x = %04x, want %04x", f, i, a[i], b[i], out[i],
                         want[i]);
        ds_half_add(h, a, a, b, HALF_N); /* out aliasing a */
        for (size_t i = 0; i < HALF_N; i++) assert_true(same_half(h, a[i], want[i]));
    }
}

static void test_half_acc_and_scale_match_reference(void **state) {
    (void)state;
    static const ds_half fmts[] = {DS_HALF_BF16, DS_HALF_F16};
    static const float ks[] = {0.5f, 1.0f / 3.0f, 3.0f, -0.25f};
    uint16_t acc[HALF_N], want[HALF_N], x16[HALF_N];
    float x[HALF_N];
    for (int f = 0; f < 2; f++) {
        ds_half h = fmts[f];
        uint32_t seed = 5u + (uint32_t)f;
        random_half(acc, HALF_N, 23u + (uint32_t)f);
        for (size_t i = 0; i < HALF_N; i++) {
            x[i] = ((float)lcg(&seed) / 16777216.0f - 0.5f) * 100.0f;
            want[i] = ref_narrow(h, ref_widen(h, acc[i]) + x[i]);
        }
        ds_half_acc_f32(h, acc, x, HALF_N);
        for (size_t i = 0; i < HALF_N; i++)
            if (!same_half(h, acc[i], want[i]))
                fail_msg("acc fmt %d i=%zu: %04x, want %04x", f, i, acc[i], want[i]);
        for (size_t k = 0; k < sizeof ks / sizeof *ks; k++) {
            random_half(x16, HALF_N, 41u + (uint32_t)k);
            for (size_t i = 0; i < HALF_N; i++)
                want[i] = ref_narrow(h, ref_widen(h, x16[i]) * ks[k]);
            ds_half_scale(h, x16, ks[k], HALF_N);
            for (size_t i = 0; i < HALF_N; i++)
                if (!same_half(h, x16[i], want[i]))
                    fail_msg("scale fmt %d k=%g i=%zu: %04x, want %04x", f, (double)ks[k], i,
                             x16[i], want[i]);
        }
    }
}

/* The special cases spelled out: inf and NaN propagate, fp16 overflows to inf. */
static void test_half_special_values(void **state) {
    (void)state;
    /* bf16: +inf 7F80, -inf FF80, 1.0 3F80, a quiet NaN 7FC0 */
    uint16_t a[4] = {0x7F80, 0x7F80, 0x7FC0, 0x3F80}, b[4] = {0x3F80, 0xFF80, 0x3F80, 0x3F80};
    uint16_t o[4];
    ds_half_add(DS_HALF_BF16, o, a, b, 4);
    assert_int_equal(o[0], 0x7F80);
    assert_true(isnan(ds_km_bf16_to_f32(o[1]))); /* inf + -inf */
    assert_true(isnan(ds_km_bf16_to_f32(o[2])));
    assert_int_equal(o[3], 0x4000); /* 2.0 */

    /* fp16: max finite 65504 = 7BFF, 16 = 4C00, 8 = 4800, +inf 7C00, NaN 7E00 */
    uint16_t c[5] = {0x7BFF, 0x7BFF, 0x7BFF, 0x7C00, 0x7E00};
    uint16_t d[5] = {0x7BFF, 0x4C00, 0x4800, 0x3C00, 0x3C00};
    ds_half_add(DS_HALF_F16, o, c, d, 4);
    assert_int_equal(o[0], 0x7C00); /* 131008: overflow */
    assert_int_equal(o[1], 0x7C00); /* 65520: the tie rounds up, to inf */
    assert_int_equal(o[2], 0x7BFF); /* 65512: rounds back to 65504 */
    assert_int_equal(o[3], 0x7C00);
    ds_half_add(DS_HALF_F16, o, c + 4, d + 4, 1);
    assert_true(isnan(ds_km_f16_to_f32(o[0])));

    uint16_t acc = 0x7BFF;
    float big = 100.0f;
    ds_half_acc_f32(DS_HALF_F16, &acc, &big, 1);
    assert_int_equal(acc, 0x7C00);
    uint16_t s[2] = {0x7BFF, 0x7C00};
    ds_half_scale(DS_HALF_F16, s, 2.0f, 2);
    assert_int_equal(s[0], 0x7C00);
    assert_int_equal(s[1], 0x7C00);
    ds_half_scale(DS_HALF_F16, s, 0.0f, 1);
    assert_true(isnan(ds_km_f16_to_f32(s[0]))); /* inf * 0 */
}

static void test_half_sumsq(void **state) {
    (void)state;
    static const ds_half fmts[] = {DS_HALF_BF16, DS_HALF_F16};
    static const uint16_t inf[2] = {0x7F80, 0x7C00}, nan[2] = {0x7FC0, 0x7E00};
    uint16_t x[HALF_N];
    for (int f = 0; f < 2; f++) {
        ds_half h = fmts[f];
        uint32_t seed = 3u;
        for (size_t i = 0; i < HALF_N; i++)
            x[i] = ref_narrow(h, ((float)lcg(&seed) / 16777216.0f - 0.5f) * 8.0f);
        double want = 0;
        for (size_t i = 0; i < HALF_N; i++) want += (double)ref_widen(h, x[i]) * ref_widen(h, x[i]);
        double got = ds_half_sumsq(h, x, HALF_N);
        assert_true(fabs(got - want) <= 1e-12 * want);
        /* one non-finite element anywhere shows */
        x[700] = inf[f];
        assert_true(isinf(ds_half_sumsq(h, x, HALF_N)));
        x[700] = nan[f];
        assert_true(isnan(ds_half_sumsq(h, x, HALF_N)));
        x[700] = (uint16_t)(nan[f] | 0x8000u); /* negative NaN */
        assert_true(isnan(ds_half_sumsq(h, x, HALF_N)));
        x[0] = (uint16_t)(inf[f] | 0x8000u); /* -inf squared is +inf; plus NaN is NaN */
        assert_false(isfinite(ds_half_sumsq(h, x, HALF_N)));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_bf16_round_trip_exhaustive),
        cmocka_unit_test(test_f16_special_values),
        cmocka_unit_test(test_f16_round_trip_exhaustive),
        cmocka_unit_test(test_f16_matches_compiler),
        cmocka_unit_test(test_half_add_matches_reference),
        cmocka_unit_test(test_half_acc_and_scale_match_reference),
        cmocka_unit_test(test_half_special_values),
        cmocka_unit_test(test_half_sumsq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
