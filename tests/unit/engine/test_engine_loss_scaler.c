/* The fp16 dynamic loss scaler follows current DeepSpeed step for step: the first growth
 * on the (window + 1)-th clean step (DynamicLossScaler's stable_interval rule), hysteresis delaying the shrink, the min_scale clamp and error,
 * consecutive hysteresis, exact save/restore, config validation; and the Lua binding. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine_test_lua.h"
#include "loss_scaler.h"

static ds_loss_scaler make(const ds_loss_scaler_cfg *c) {
    ds_loss_scaler s;
    ds_err err = {{0}};
    if (ds_loss_scaler_init(&s, c, &err) != 0) fail_msg("init: %s", err.msg);
    return s;
}

static void step(ds_loss_scaler *s, int overflow) {
    ds_err err = {{0}};
    if (ds_loss_scaler_update(s, overflow, &err) != 0) fail_msg("update: %s", err.msg);
}

static void clean_steps(ds_loss_scaler *s, int n) {
    for (int i = 0; i < n; i++) step(s, 0);
}

static void test_defaults_are_deepspeeds(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    assert_true(c.init_scale == 65536.0);
    assert_true(c.min_scale == 1.0);
    assert_true(c.scale_factor == 2.0);
    assert_int_equal(c.scale_window, 1000);
    assert_int_equal(c.hysteresis, 2);
    assert_int_equal(c.consecutive_hysteresis, 0);
    assert_int_equal(c.raise_at_min, 1);
    ds_loss_scaler s = make(&c);
    assert_true(s.st.scale == 65536.0);
    assert_int_equal(s.st.iter, 0);
    assert_int_equal(s.st.last_overflow, -1);
    assert_int_equal(s.st.hysteresis_left, 2);
}

/* last_overflow starts at -1, so stable = iter - last_overflow - 1 = iter is a positive
 * multiple of 1000 first at iter 1000: the scale doubles on the 1001st clean update
 * (DeepSpeed before its stable_interval rule grew on the 1000th), then every 1000. */
static void test_first_growth_on_the_1001st_clean_step(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    ds_loss_scaler s = make(&c);
    clean_steps(&s, 1000);
    assert_int_equal(s.st.iter, 1000);
    assert_true(s.st.scale == 65536.0);
    step(&s, 0); /* iter 1000 */
    assert_true(s.st.scale == 131072.0);
    assert_int_equal(s.st.iter, 1001);
    clean_steps(&s, 999);
    assert_true(s.st.scale == 131072.0);
    step(&s, 0); /* iter 2000 */
    assert_true(s.st.scale == 262144.0);
}

/* Step by step against current DeepSpeed's DynamicLossScaler.update_scale with window 3,
 * hysteresis 2: each row is one update and the state it leaves. Worked by hand from
 * DeepSpeed's rule: a clean step at iter i grows the scale when
 * s = i - last_overflow - 1 is > 0 and a multiple of 3. */
static void test_step_by_step_as_deepspeed(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.init_scale = 1024;
    c.scale_window = 3;
    ds_loss_scaler s = make(&c);
    static const struct {
        int overflow;
        double scale;
        int hysteresis_left;
        int last_overflow;
    } rows[] = {
        {0, 1024, 2, -1}, /* iter 0: s = 0 */
        {0, 1024, 2, -1}, /* iter 1: s = 1 */
        {0, 1024, 2, -1}, /* iter 2: s = 2 (the older rule grew here) */
        {0, 2048, 2, -1}, /* iter 3: s = 3, the 4th clean step: grows */
        {0, 2048, 2, -1}, /* iter 4 */
        {0, 2048, 2, -1}, /* iter 5 */
        {0, 4096, 2, -1}, /* iter 6: s = 6: grows again, `window` steps later */
        {1, 4096, 1, 7},  /* iter 7: overflow, hysteresis 2 -> 1 */
        {0, 4096, 1, 7},  /* iter 8: s = 0; hysteresis stays spent */
        {1, 2048, 1, 9},  /* iter 9: overflow with hysteresis 1: halves */
        {0, 2048, 1, 9},  /* iter 10: s = 0 */
        {0, 2048, 1, 9},  /* iter 11: s = 1 */
        {0, 2048, 1, 9},  /* iter 12: s = 2 */
        {0, 4096, 2, 9},  /* iter 13: s = 3: grows, hysteresis restored */
        {1, 4096, 1, 14}, /* iter 14 */
        {1, 2048, 1, 15}, /* iter 15 */
        {1, 1024, 1, 16}, /* iter 16 */
        {0, 1024, 1, 16}, /* iter 17 */
        {0, 1024, 1, 16}, /* iter 18 */
        {0, 1024, 1, 16}, /* iter 19 */
        {0, 2048, 2, 16}, /* iter 20: s = 3 */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        step(&s, rows[i].overflow);
        if (s.st.scale != rows[i].scale || s.st.hysteresis_left != rows[i].hysteresis_left ||
            s.st.last_overflow != rows[i].last_overflow || s.st.iter != (int64_t)i + 1)
            fail_msg("after iter %zu: scale %g hysteresis %d last_overflow %lld iter %lld; "
                     "expected %g %d %d %zu", i, s.st.scale, s.st.hysteresis_left,
                     (long long)s.st.last_overflow, (long long)s.st.iter, rows[i].scale,
                     rows[i].hysteresis_left, rows[i].last_overflow, i + 1);
    }
}

/* Default hysteresis 2: the first overflow only spends hysteresis, the second halves the
 * scale. Clean steps do not restore hysteresis until the scale grows, so a third
 * overflow right after a clean step halves again. The clean step that follows `window`
 * clean steps since the last overflow doubles the scale and restores hysteresis to 2. */
static void test_hysteresis_delays_the_shrink(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    ds_loss_scaler s = make(&c);

    step(&s, 1); /* iter 0 */
    assert_true(s.st.scale == 65536.0);
    assert_int_equal(s.st.hysteresis_left, 1);
    assert_int_equal(s.st.last_overflow, 0);

    step(&s, 1); /* iter 1 */
    assert_true(s.st.scale == 32768.0);
    assert_int_equal(s.st.hysteresis_left, 1);
    assert_int_equal(s.st.last_overflow, 1);

    step(&s, 0); /* iter 2: clean, no growth, hysteresis stays spent */
    assert_int_equal(s.st.hysteresis_left, 1);
    step(&s, 1); /* iter 3 */
    assert_true(s.st.scale == 16384.0);
    assert_int_equal(s.st.last_overflow, 3);

    clean_steps(&s, 1000); /* iters 4..1003 */
    assert_true(s.st.scale == 16384.0);
    assert_int_equal(s.st.hysteresis_left, 1);
    step(&s, 0); /* iter 1004: 1000 clean steps since the overflow at 3 came before it */
    assert_true(s.st.scale == 32768.0);
    assert_int_equal(s.st.hysteresis_left, 2);

    step(&s, 1); /* hysteresis restored: this one is absorbed again */
    assert_true(s.st.scale == 32768.0);
    assert_int_equal(s.st.hysteresis_left, 1);
}

/* Consecutive mode: any clean step restores hysteresis, so overflows separated by a
 * clean step never shrink the scale; two in a row still do. */
static void test_consecutive_hysteresis(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.consecutive_hysteresis = 1;
    c.scale_window = 100;
    ds_loss_scaler s = make(&c);
    for (int i = 0; i < 10; i++) {
        step(&s, 1);
        assert_int_equal(s.st.hysteresis_left, 1);
        step(&s, 0);
        assert_int_equal(s.st.hysteresis_left, 2);
    }
    assert_true(s.st.scale == 65536.0);
    step(&s, 1);
    step(&s, 1);
    assert_true(s.st.scale == 32768.0);

    /* The same alternation without consecutive mode shrinks on the second overflow. */
    c.consecutive_hysteresis = 0;
    ds_loss_scaler t = make(&c);
    step(&t, 1);
    step(&t, 0);
    step(&t, 1);
    assert_true(t.st.scale == 32768.0);
}

static void test_hysteresis_one_shrinks_every_overflow(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.hysteresis = 1;
    c.init_scale = 1024;
    c.scale_factor = 4;
    ds_loss_scaler s = make(&c);
    step(&s, 1);
    assert_true(s.st.scale == 256.0);
    step(&s, 1);
    assert_true(s.st.scale == 64.0);
    assert_int_equal(s.st.hysteresis_left, 1);
}

/* A shrink never goes below min_scale; without raise_at_min, overflowing there just
 * stays there. */
static void test_min_scale_clamps(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.init_scale = 3;
    c.min_scale = 2;
    c.hysteresis = 1;
    c.raise_at_min = 0;
    ds_loss_scaler s = make(&c);
    step(&s, 1);
    assert_true(s.st.scale == 2.0);
    step(&s, 1);
    assert_true(s.st.scale == 2.0);
    assert_int_equal(s.st.last_overflow, 1);
    assert_int_equal(s.st.iter, 2);
}

/* With raise_at_min (the default) the overflow that finds the scale at its minimum is an
 * error and leaves the state as it was. */
static void test_error_at_min_scale(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.init_scale = 4;
    c.hysteresis = 1;
    ds_loss_scaler s = make(&c);
    step(&s, 1);
    step(&s, 1);
    assert_true(s.st.scale == 1.0);
    ds_loss_scaler_state before = s.st;
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_update(&s, 1, &err), -1);
    assert_non_null(strstr(err.msg, "already at its minimum 1"));
    assert_non_null(strstr(err.msg, "still overflow"));
    assert_memory_equal(&s.st, &before, sizeof before);
    step(&s, 0); /* a clean step is still fine */
    assert_int_equal(s.st.iter, 3);
}

/* With hysteresis, the error waits for hysteresis to run out at min_scale as well. */
static void test_error_at_min_scale_after_hysteresis(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.init_scale = 1;
    c.hysteresis = 3;
    ds_loss_scaler s = make(&c);
    step(&s, 1);
    step(&s, 1);
    assert_int_equal(s.st.hysteresis_left, 1);
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_update(&s, 1, &err), -1);
    assert_non_null(strstr(err.msg, "minimum"));
}

static void expect_bad_cfg(ds_loss_scaler_cfg c, const char *needle) {
    ds_loss_scaler s;
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_init(&s, &c, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("'%s' does not mention '%s'", err.msg, needle);
}

static void test_config_is_validated(void **state) {
    (void)state;
    ds_loss_scaler_cfg d;
    ds_loss_scaler_defaults(&d);
    ds_loss_scaler_cfg c;
    c = d, c.init_scale = 0, expect_bad_cfg(c, "init_scale = 0");
    c = d, c.init_scale = INFINITY, expect_bad_cfg(c, "init_scale");
    c = d, c.init_scale = NAN, expect_bad_cfg(c, "init_scale");
    c = d, c.min_scale = 0, expect_bad_cfg(c, "min_scale = 0 must be > 0");
    c = d, c.min_scale = -1, expect_bad_cfg(c, "min_scale");
    c = d, c.min_scale = NAN, expect_bad_cfg(c, "min_scale");
    c = d, c.min_scale = 131072, expect_bad_cfg(c, "above init_scale");
    c = d, c.scale_window = 0, expect_bad_cfg(c, "scale_window = 0");
    c = d, c.hysteresis = 0, expect_bad_cfg(c, "hysteresis = 0");
    c = d, c.scale_factor = 1, expect_bad_cfg(c, "scale_factor = 1");
    c = d, c.scale_factor = 0.5, expect_bad_cfg(c, "scale_factor");
    c = d, c.scale_factor = NAN, expect_bad_cfg(c, "scale_factor");
    c = d, c.scale_factor = INFINITY, expect_bad_cfg(c, "scale_factor");
    /* The edges that are allowed. */
    c = d, c.min_scale = c.init_scale, c.scale_window = 1, c.hysteresis = 1;
    ds_loss_scaler s = make(&c);
    step(&s, 0); /* window 1: every clean step grows but the first after the start */
    assert_true(s.st.scale == 65536.0);
    step(&s, 0);
    assert_true(s.st.scale == 131072.0);
}

static void test_overflow_means_not_finite(void **state) {
    (void)state;
    assert_false(ds_loss_scaler_overflow(0.0));
    assert_false(ds_loss_scaler_overflow(1e30));
    assert_false(ds_loss_scaler_overflow(DBL_MAX));
    assert_true(ds_loss_scaler_overflow(INFINITY));
    assert_true(ds_loss_scaler_overflow(-INFINITY));
    assert_true(ds_loss_scaler_overflow(NAN));
}

/* A scaler restored from another's state continues exactly as the original would. */
static void test_state_round_trips(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.scale_window = 7;
    c.hysteresis = 3;
    ds_loss_scaler a = make(&c);
    static const int seq[] = {0, 1, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) step(&a, seq[i]);
    ds_loss_scaler_state saved = a.st;

    ds_loss_scaler b = make(&c);
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_set_state(&b, &saved, &err), 0);
    for (int i = 0; i < 40; i++) {
        int o = i % 9 == 4 || i % 13 == 0;
        step(&a, o);
        step(&b, o);
        assert_memory_equal(&a.st, &b.st, sizeof a.st);
    }
}

static void expect_bad_state(ds_loss_scaler *s, ds_loss_scaler_state st, const char *needle) {
    ds_loss_scaler_state before = s->st;
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_set_state(s, &st, &err), -1);
    if (!strstr(err.msg, needle)) fail_msg("'%s' does not mention '%s'", err.msg, needle);
    assert_memory_equal(&s->st, &before, sizeof before);
}

static void test_restored_state_is_validated(void **state) {
    (void)state;
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    c.min_scale = 4;
    ds_loss_scaler s = make(&c);
    ds_loss_scaler_state ok = {1024, 10, 3, 1}, st;
    st = ok, st.scale = 2, expect_bad_state(&s, st, "scale = 2");
    st = ok, st.scale = INFINITY, expect_bad_state(&s, st, "scale");
    st = ok, st.scale = NAN, expect_bad_state(&s, st, "scale");
    st = ok, st.iter = -1, expect_bad_state(&s, st, "iter = -1");
    st = ok, st.last_overflow = 10, expect_bad_state(&s, st, "last_overflow = 10");
    st = ok, st.last_overflow = -2, expect_bad_state(&s, st, "last_overflow = -2");
    st = ok, st.hysteresis_left = 0, expect_bad_state(&s, st, "hysteresis = 0");
    st = ok, st.hysteresis_left = 3, expect_bad_state(&s, st, "hysteresis = 3 must be in 1..2");
    ds_err err = {{0}};
    assert_int_equal(ds_loss_scaler_set_state(&s, &ok, &err), 0);
    assert_memory_equal(&s.st, &ok, sizeof ok);
    ds_loss_scaler_state fresh = {65536, 0, -1, 2}; /* a fresh scaler's state */
    assert_int_equal(ds_loss_scaler_set_state(&s, &fresh, &err), 0);
}

/* The binding: defaults, a hysteresis sequence, state round trip, and errors that name
 * the key and the script line. */
static void test_lua_binding(void **state) {
    (void)state;
    lua_State *L = eng_lua_new();
    assert_non_null(L);
    const char *code =
        "local core = require 'ds._core'\n"
        "local s = core.loss_scaler{}\n"
        "assert(s:scale() == 65536)\n"
        "s:update(true); assert(s:scale() == 65536)\n"
        "s:update(true); assert(s:scale() == 32768)\n"
        "local st = s:state()\n"
        "assert(st.scale == 32768 and st.iter == 2 and st.last_overflow == 1 and st.hysteresis == 1)\n"
        "for i = 1, 1000 do s:update(false) end\n"
        "assert(s:scale() == 32768)\n"
        "s:update(false)\n"
        "assert(s:scale() == 65536 and s:state().hysteresis == 2)\n"
        "local t = core.loss_scaler{init_scale = 8, scale_window = 3, hysteresis = 1,\n"
        "  min_scale = 2, scale_factor = 2, consecutive_hysteresis = true,\n"
        "  raise_error_at_min_scale = true}\n"
        "t:update(true); t:update(true); assert(t:scale() == 2)\n"
        "local ok, e = pcall(t.update, t, true)\n"
        "assert(not ok and e:find('already at its minimum 2', 1, true), e)\n"
        "ok, e = pcall(function() t:update(true) end)\n" /* line 18 */
        "assert(not ok and e:find('^test:18: '), e)\n"
        "local u = core.loss_scaler{init_scale = 8}\n"
        "u:set_state(st); assert(u:scale() == 32768 and u:state().iter == 2)\n"
        "ok, e = pcall(core.loss_scaler, {scale_windw = 5})\n"
        "assert(not ok and e:find(\"unknown key 'scale_windw'\", 1, true), e)\n"
        "ok, e = pcall(core.loss_scaler, {hysteresis = 0})\n"
        "assert(not ok and e:find('hysteresis = 0 must be >= 1', 1, true), e)\n"
        "ok, e = pcall(core.loss_scaler, {scale_window = 1.5})\n"
        "assert(not ok and e:find(\"'scale_window' must be an integer\", 1, true), e)\n"
        "ok, e = pcall(core.loss_scaler, {consecutive_hysteresis = 1})\n"
        "assert(not ok and e:find(\"'consecutive_hysteresis' must be a boolean\", 1, true), e)\n"
        "ok, e = pcall(u.set_state, u, {scale = 1024, iter = 5, last_overflow = 7, hysteresis = 1})\n"
        "assert(not ok and e:find('last_overflow = 7', 1, true), e)\n"
        "ok, e = pcall(u.set_state, u, {scale = 1024, iter = 5, hysteresis = 1})\n"
        "assert(not ok and e:find(\"'last_overflow' must be an integer\", 1, true), e)\n"
        "assert(u:scale() == 32768)\n"
        "assert(core.grad_overflow(1/0) and core.grad_overflow(0/0) and not core.grad_overflow(3.5))\n";
    assert_int_equal(eng_lua_run(L, code, 0), 0);
    eng_lua_close(L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_are_deepspeeds),
        cmocka_unit_test(test_first_growth_on_the_1001st_clean_step),
        cmocka_unit_test(test_step_by_step_as_deepspeed),
        cmocka_unit_test(test_hysteresis_delays_the_shrink),
        cmocka_unit_test(test_consecutive_hysteresis),
        cmocka_unit_test(test_hysteresis_one_shrinks_every_overflow),
        cmocka_unit_test(test_min_scale_clamps),
        cmocka_unit_test(test_error_at_min_scale),
        cmocka_unit_test(test_error_at_min_scale_after_hysteresis),
        cmocka_unit_test(test_config_is_validated),
        cmocka_unit_test(test_overflow_means_not_finite),
        cmocka_unit_test(test_state_round_trips),
        cmocka_unit_test(test_restored_state_is_validated),
        cmocka_unit_test(test_lua_binding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
