/* The JSON reader: valid documents into a tree (offsets, integers, escapes, duplicates),
 * every kind of malformed text refused with the byte and what was found, the depth and
 * value limits, the canonical form written back, and mutations that must never crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ds_json_read.h"

static ds_jv *parse(const char *s, ds_err *err) { return ds_jv_parse(s, strlen(s), err); }

static void test_valid(void **state) {
    (void)state;
    ds_err err = {""};
    ds_jv *v = parse(" {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
                     " \"big\": 9007199254740993, \"o\": {}} ", &err);
    if (!v) fail_msg("%s", err.msg);
    assert_int_equal(v->type, DS_JV_OBJ);
    assert_int_equal(v->at, 1);
    const ds_jv *a = ds_jv_get(v, "a");
    assert_int_equal(a->type, DS_JV_ARR);
    assert_int_equal(a->len, 5);
    assert_int_equal(a->at, 7);
    assert_int_equal(a->items[1].at, 11);
    assert_true(a->items[0].is_int && a->items[0].inum == 1 && a->items[0].num == 1.0);
    assert_true(!a->items[1].is_int && a->items[1].num == -2500.0);
    assert_true(a->items[2].type == DS_JV_BOOL && a->items[2].boolean);
    assert_true(a->items[3].type == DS_JV_BOOL && !a->items[3].boolean);
    assert_int_equal(a->items[4].type, DS_JV_NULL);
    const ds_jv *s = ds_jv_get(v, "s");
    assert_string_equal(s->str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_int_equal(s->len, 8);
    assert_true(ds_jv_get(v, "big")->inum == 9007199254740993LL);
    assert_int_equal(ds_jv_get(v, "o")->len, 0);
    assert_null(ds_jv_get(v, "missing"));
    assert_null(ds_jv_get(a, "a")); /* not an object */
    assert_null(ds_jv_get(NULL, "a"));
    assert_int_equal(ds_jv_depth(v), 2);
    assert_string_equal(ds_jv_type_name(a->type), "an array");
    ds_jv_free(v);
    ds_jv_free(NULL);
}

/* Integers up to int64 are exact; beyond, and with a fraction or exponent, doubles. */
static void test_numbers(void **state) {
    (void)state;
    ds_err err = {""};
    ds_jv *v = parse("[9223372036854775807, -9223372036854775808, 9223372036854775808, 1e2, 0,"
                     " -0, 0.5, 1E-2, 123456789012345678901234567890123456789012345678901234567890"
                     "12345678901234567890]", &err);
    if (!v) fail_msg("%s", err.msg);
    assert_true(v->items[0].is_int && v->items[0].inum == INT64_MAX);
    assert_true(v->items[1].is_int && v->items[1].inum == INT64_MIN);
    assert_true(!v->items[2].is_int && v->items[2].num == 9223372036854775808.0);
    assert_true(!v->items[3].is_int && v->items[3].num == 100.0);
    assert_true(v->items[4].is_int && v->items[4].inum == 0);
    assert_true(v->items[5].is_int && v->items[5].inum == 0);
    assert_true(v->items[6].num == 0.5 && v->items[7].num == 0.01);
    assert_true(!v->items[8].is_int && v->items[8].num > 1e79); /* longer than 72 bytes */
    ds_jv_free(v);
}

/* Strings may hold NULs (len says how long); duplicate keys are kept, get finds the first. */
static void test_strings_and_duplicates(void **state) {
    (void)state;
    ds_err err = {""};
    ds_jv *v = parse("{\"k\":\"a\\u0000b\",\"k\":2,\"\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", &err);
    if (!v) fail_msg("%s", err.msg);
    assert_int_equal(v->len, 3);
    const ds_jv *k = ds_jv_get(v, "k");
    assert_int_equal(k->type, DS_JV_STR);
    assert_int_equal(k->len, 3);
    assert_memory_equal(k->str, "a\0b", 4);
    assert_true(v->items[1].is_int && v->items[1].inum == 2);
    assert_string_equal(ds_jv_get(v, "")->str, "\"\\/\b\f\n\r\t");
    ds_jv_free(v);
}

static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"", "byte 0: expected a JSON value, found the end of the text"},
        {"{", "byte 1: expected a key (a string), found the end of the text"},
        {"[1,]", "byte 3: expected a JSON value, found ']'"},
        {"{\"a\":}", "byte 5: expected a JSON value, found '}'"},
        {"{\"a\" 1}", "byte 5: expected ':' after a key, found '1'"},
        {"{a:1}", "byte 1: expected a key (a string), found 'a'"},
        {"{\"a\":1,}", "byte 7: expected a key (a string), found '}'"},
        {"[1 2]", "byte 3: expected ',' or ']', found '2'"},
        {"{\"a\":1 \"b\":2}", "byte 7: expected ',' or '}', found '\"'"},
        {"[1", "byte 2: expected ',' or ']', found the end of the text"},
        {"\"abc", "byte 4: unterminated string, found the end of the text"},
        {"[\"\\", "unterminated string"},
        {"{\"k\":\"\\u", "unterminated string"},
        {"\"\\x\"", "byte 2: bad escape in string, found 'x'"},
        {"\"\\u12\"", "byte 3: expected 4 hex digits after \\u"},
        {"\"\\u12g4\"", "byte 5: expected a hex digit in \\u escape, found 'g'"},
        {"\"\\ud800\"", "byte 7: high surrogate not followed by a \\u low surrogate"},
        {"\"\\ud800\\u0041\"", "byte 9: expected a low surrogate, found '0'"},
        {"\"\\udc00\"", "byte 3: lone low surrogate in \\u escape"},
        {"\"a\nb\"", "byte 2: control character inside a string, found byte 0x0a"},
        {"{\"a\\u0000b\":1}", "byte 3: \\u0000 inside a key"},
        {"01", "byte 1: leading zero in a number, found '1'"},
        {"-01", "byte 2: leading zero in a number"},
        {"1.", "byte 2: expected a digit after '.', found the end of the text"},
        {"1.e5", "byte 2: expected a digit after '.', found 'e'"},
        {"-", "byte 1: expected a digit, found the end of the text"},
        {"-a", "byte 1: expected a digit, found 'a'"},
        {"+1", "byte 0: expected a JSON value, found '+'"},
        {"1e", "byte 2: expected a digit in the exponent"},
        {"1e+", "byte 3: expected a digit in the exponent"},
        {"1e999", "byte 0: number out of range"},
        {"[-1e999]", "byte 1: number out of range"},
        {"tru", "byte 0: expected a JSON value, found 't'"},
        {"nul", "expected a JSON value"},
        {"True", "expected a JSON value, found 'T'"},
        {"[1]]", "byte 3: only whitespace may follow the value, found ']'"},
        {"{} {}", "byte 3: only whitespace may follow the value, found '{'"},
        {"1 \x01", "byte 2: only whitespace may follow the value, found byte 0x01"},
        {"\xef\xbb\xbf{}", "byte 0: expected a JSON value, found byte 0xef"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_err err = {""};
        ds_jv *v = parse(bad[i].text, &err);
        if (v) {
            ds_jv_free(v);
            fail_msg("accepted: %s", bad[i].text);
        }
        if (!strstr(err.msg, bad[i].msg))
            fail_msg("for %s\nexpected \"%s\"\n     got \"%s\"", bad[i].text, bad[i].msg, err.msg);
    }
}

/* The text need not be NUL-terminated: a length cuts it anywhere. */
static void test_length_bounds_the_text(void **state) {
    (void)state;
    ds_err err = {""};
    ds_jv *v = ds_jv_parse("[12]34", 4, &err);
    if (!v) fail_msg("%s", err.msg);
    assert_int_equal(v->items[0].inum, 12);
    ds_jv_free(v);
    assert_null(ds_jv_parse("truex", 3, &err));
    assert_non_null(strstr(err.msg, "byte 0: expected a JSON value"));
}

static void test_limits(void **state) {
    (void)state;
    ds_err err = {""};
    /* DS_JV_MAX_DEPTH levels parse (and their depth says so); one more is refused. */
    char deep[2 * DS_JV_MAX_DEPTH + 3];
    for (int levels = DS_JV_MAX_DEPTH; levels <= DS_JV_MAX_DEPTH + 1; levels++) {
        memset(deep, '[', (size_t)levels);
        memset(deep + levels, ']', (size_t)levels);
        ds_jv *v = ds_jv_parse(deep, 2 * (size_t)levels, &err);
        if (levels == DS_JV_MAX_DEPTH) {
            if (!v) fail_msg("%s", err.msg);
            assert_int_equal(ds_jv_depth(v), DS_JV_MAX_DEPTH);
            ds_jv_free(v);
        } else {
            assert_null(v);
            assert_non_null(strstr(err.msg, "byte 30: JSON nested too deeply (more than 30 levels)"));
        }
    }
    /* Very deep input is refused, not recursed into. */
    char *huge = malloc(100000);
    memset(huge, '[', 100000);
    assert_null(ds_jv_parse(huge, 100000, &err));
    assert_non_null(strstr(err.msg, "nested too deeply"));
    free(huge);
    /* Chosen limits: depth and the number of values ([1,2,3] is four). */
    ds_jv_limits lim = {.max_depth = 2, .max_values = 4};
    ds_jv *v = ds_jv_parse_limits("[1,2,3]", 7, &lim, &err);
    if (!v) fail_msg("%s", err.msg);
    ds_jv_free(v);
    v = ds_jv_parse_limits("[[1]]", 5, &lim, &err);
    if (!v) fail_msg("%s", err.msg);
    ds_jv_free(v);
    assert_null(ds_jv_parse_limits("[[[1]]]", 7, &lim, &err));
    assert_non_null(strstr(err.msg, "byte 2: JSON nested too deeply (more than 2 levels)"));
    assert_null(ds_jv_parse_limits("[1,2,3,4]", 9, &lim, &err));
    assert_non_null(strstr(err.msg, "byte 7: more than 4 JSON values"));
    assert_null(ds_jv_parse_limits("{\"a\":[1,2],\"b\":1}", 17, &lim, &err));
    assert_non_null(strstr(err.msg, "byte 15: more than 4 JSON values"));
}

/* Emitting and parsing again gives the same text: the checksum form is stable. Checkpoint
 * meta.json records the checksum of the engine's object in this form (the tree written
 * back compactly), so it must be a fixed point of parse + emit. */
static void test_emit_round_trip(void **state) {
    (void)state;
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"{\"a\":[1,-2.5e3,true,false,null,1e300,0.1],\"s\":\"x\\u00e9\\n\\u0000\","
         "\"big\":9223372036854775807,\"o\":{\"\":[]},\"a\":2}",
         "{\"a\":[1,-2500,true,false,null,1e+300,0.1],\"s\":\"x\xc3\xa9\\n\\u0000\","
         "\"big\":9223372036854775807,\"o\":{\"\":[]},\"a\":2}"},
        {" {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
         " \"big\": 9007199254740993, \"o\": {}} ",
         "{\"a\":[1,-2500,true,false,null],\"s\":\"x\xc3\xa9\xf0\x9f\x98\x80\\n\","
         "\"big\":9007199254740993,\"o\":{}}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ds_err err = {""};
        ds_jv *v = parse(cases[i].src, &err);
        if (!v) fail_msg("%s", err.msg);
        ds_json j;
        ds_json_init_buf(&j, 0);
        ds_jv_emit(&j, v);
        assert_false(j.bad);
        assert_string_equal(ds_buf_str(&j.text), cases[i].want);
        ds_jv *v2 = ds_jv_parse(ds_buf_str(&j.text), j.text.len, &err);
        if (!v2) fail_msg("%s", err.msg);
        ds_json j2;
        ds_json_init_buf(&j2, 0);
        ds_jv_emit(&j2, v2);
        assert_string_equal(ds_buf_str(&j.text), ds_buf_str(&j2.text));
        ds_buf_free(&j.text);
        ds_buf_free(&j2.text);
        ds_jv_free(v);
        ds_jv_free(v2);
    }
}

/* Every prefix and every single-byte change of a valid document either parses or is
 * refused with a "byte K:" message; under ASan this shows no read past the input and
 * no leak on any error path. */
static void test_mutations(void **state) {
    (void)state;
    const char *doc = "{\"format\":\"x\",\"arrays\":[{\"name\":\"s\\\"0\",\"numel\":12,"
                      "\"ranges\":[{\"rank\":0,\"begin\":0,\"end\":12}]}],\"e\":[1.5e-3,\"\\u00e9\","
                      "\"\\ud83d\\ude00\",-0.0,true,null]}";
    size_t n = strlen(doc);
    char *buf = malloc(n);
    for (size_t cut = 0; cut <= n; cut++) {
        memcpy(buf, doc, cut);
        ds_err err = {""};
        ds_jv *v = ds_jv_parse(buf, cut, &err);
        if (cut < n) assert_null(v); /* every proper prefix of an object is incomplete */
        if (!v) assert_int_equal(strncmp(err.msg, "byte ", 5), 0);
        ds_jv_free(v);
    }
    const char subst[] = "{}[]\",:\\u0e-9 \x01\xff";
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof subst - 1; k++) {
            memcpy(buf, doc, n);
            buf[i] = subst[k];
            ds_err err = {""};
            ds_jv *v = ds_jv_parse(buf, n, &err);
            if (!v) assert_int_equal(strncmp(err.msg, "byte ", 5), 0);
            ds_jv_free(v);
        }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings_and_duplicates),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_length_bounds_the_text),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_emit_round_trip),
        cmocka_unit_test(test_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
