/* ds_json: nesting, separators, escaping (control characters, quotes, invalid UTF-8),
 * numbers, and misuse detection. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ds_json.h"

static void test_nesting(void **st) {
    (void)st;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_json_obj(&j);
    ds_json_kint(&j, "a", 1);
    ds_json_key(&j, "b");
    ds_json_arr(&j);
    ds_json_int(&j, -2);
    ds_json_bool(&j, 1);
    ds_json_null(&j);
    ds_json_obj(&j);
    ds_json_end(&j);
    ds_json_arr(&j);
    ds_json_end(&j);
    ds_json_end(&j);
    ds_json_kstr(&j, "c", NULL);
    ds_json_kbool(&j, "d", 0);
    ds_json_end(&j);
    ds_json_newline(&j);
    assert_false(j.bad);
    assert_string_equal(ds_buf_str(&j.text), "{\"a\":1,\"b\":[-2,true,null,{},[]],\"c\":null,\"d\":false}\n");
    ds_buf_free(&j.text);

    ds_json_init_buf(&j, 1);
    ds_json_obj(&j);
    ds_json_kint(&j, "a", 1);
    ds_json_key(&j, "b");
    ds_json_arr(&j);
    ds_json_int(&j, 2);
    ds_json_end(&j);
    ds_json_key(&j, "e");
    ds_json_obj(&j);
    ds_json_end(&j);
    ds_json_end(&j);
    assert_string_equal(ds_buf_str(&j.text), "{\n  \"a\": 1,\n  \"b\": [\n    2\n  ],\n  \"e\": {}\n}");
    ds_buf_free(&j.text);
}

static void test_escaping(void **st) {
    (void)st;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_json_arr(&j);
    ds_json_str(&j, "q\"b\\s/\n\r\t\b\f\x01\x1f\x7f");
    ds_json_str(&j, "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80"); /* é € 😀 pass through */
    ds_json_str(&j, "bad\xff\xc3(\xed\xa0\x80\xc0\xaf\xf4\x90\x80\x80");
    ds_json_strn(&j, "nul\0in", 6);
    ds_json_str(&j, "");
    ds_json_end(&j);
    assert_false(j.bad);
    assert_string_equal(ds_buf_str(&j.text),
        "[\"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\","
        "\"h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80\","
        "\"bad\\ufffd\\ufffd(\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\","
        "\"nul\\u0000in\",\"\"]");
    ds_buf_free(&j.text);
    /* keys are escaped too */
    ds_json_init_buf(&j, 0);
    ds_json_obj(&j);
    ds_json_kint(&j, "k\"\n", 1);
    ds_json_end(&j);
    assert_string_equal(ds_buf_str(&j.text), "{\"k\\\"\\n\":1}");
    ds_buf_free(&j.text);
    /* the stateless FILE helper */
    char *mem = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mem, &len);
    ds_json_write_string(f, "a\"\xff", 3);
    fclose(f);
    assert_string_equal(mem, "\"a\\\"\\ufffd\"");
    free(mem);
}

static void test_numbers(void **st) {
    (void)st;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_json_arr(&j);
    ds_json_num(&j, 0.1);
    ds_json_num(&j, 1.0 / 3.0);
    ds_json_num(&j, 1e300);
    ds_json_num(&j, -0.0);
    ds_json_num(&j, NAN);
    ds_json_num(&j, INFINITY);
    ds_json_num(&j, 42);
    ds_json_int(&j, -9223372036854775807LL - 1);
    ds_json_end(&j);
    assert_string_equal(ds_buf_str(&j.text), "[0.1,0.33333333333333331,1e+300,-0,null,null,42,-9223372036854775808]");
    ds_buf_free(&j.text);
}

static void test_misuse(void **st) {
    (void)st;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_json_obj(&j);
    ds_json_int(&j, 1); /* a value where a key is due */
    assert_true(j.bad);
    ds_buf_free(&j.text);
    ds_json_init_buf(&j, 0);
    ds_json_end(&j); /* nothing to close */
    assert_true(j.bad);
    ds_buf_free(&j.text);
    ds_json_init_buf(&j, 0);
    for (int i = 0; i < DS_JSON_MAX_DEPTH + 1; i++) ds_json_arr(&j);
    assert_true(j.bad);
    ds_buf_free(&j.text);
    ds_json_init_buf(&j, 0);
    ds_json_arr(&j);
    ds_json_key(&j, "k"); /* a key inside an array */
    assert_true(j.bad);
    ds_buf_free(&j.text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_misuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
