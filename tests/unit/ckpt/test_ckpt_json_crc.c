/* The building blocks: CRC-32C (hardware and table agree, known vector) and the meta.json
 * reader (valid documents, and hostile ones refused without crashing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckpt_json.h"
#include "crc32c.h"

static void test_crc_known_vector(void **state) {
    (void)state;
    assert_int_equal(ds_crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(ds_crc32c_portable(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(ds_crc32c(0, "", 0), 0);
}

static void test_crc_paths_agree_and_chain(void **state) {
    (void)state;
    unsigned char buf[4099];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len + off <= sizeof buf; len += 1 + len / 3) {
            uint32_t hw = ds_crc32c(0, buf + off, len);
            assert_int_equal(hw, ds_crc32c_portable(0, buf + off, len));
            size_t cut = len / 3;
            assert_int_equal(hw, ds_crc32c(ds_crc32c(0, buf + off, cut), buf + off + cut, len - cut));
        }
}

static ds_ckj *parse(const char *s, ds_err *err) { return ds_ckj_parse(s, strlen(s), err); }

static void test_json_valid(void **state) {
    (void)state;
    ds_err err;
    ds_ckj *v = parse(" {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
                      " \"big\": 9007199254740993, \"o\": {}} ", &err);
    assert_non_null(v);
    const ds_ckj *a = ds_ckj_get(v, "a");
    assert_int_equal(a->type, CKJ_ARR);
    assert_int_equal(a->len, 5);
    assert_true(a->items[0].is_int && a->items[0].inum == 1);
    assert_true(!a->items[1].is_int && a->items[1].num == -2500.0);
    const ds_ckj *s = ds_ckj_get(v, "s");
    assert_string_equal(s->str, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    assert_true(ds_ckj_get(v, "big")->inum == 9007199254740993LL);
    assert_null(ds_ckj_get(v, "missing"));

    /* Emitting and parsing again gives the same text: the checksum form is stable. */
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_ckj_emit(&j, v);
    ds_ckj *v2 = ds_ckj_parse(j.buf, j.len, &err);
    assert_non_null(v2);
    ds_json j2;
    ds_json_init_buf(&j2, 0);
    ds_ckj_emit(&j2, v2);
    assert_string_equal(j.buf, j2.buf);
    free(j.buf);
    free(j2.buf);
    ds_ckj_free(v);
    ds_ckj_free(v2);
}

static void test_json_hostile(void **state) {
    (void)state;
    const char *bad[] = {
        "", "{", "[1,]", "{\"a\":}", "{\"a\" 1}", "{a:1}", "[1 2]", "\"abc", "\"\\x\"",
        "\"\\u12\"", "\"\\ud800\"", "\"\\ud800\\u0041\"", "\"\\udc00\"", "01", "1.", "-",
        "1e", "tru", "nul", "[1]]", "{} {}", "\"a\nb\"", "1e999", "[\"\\", "{\"k\":\"\\u",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_err err = {""};
        ds_ckj *v = parse(bad[i], &err);
        if (v) fail_msg("accepted: %s", bad[i]);
        assert_non_null(strstr(err.msg, "offset "));
    }
    /* Deep nesting is refused, not recursed into. */
    char deep[4001];
    memset(deep, '[', 4000);
    deep[4000] = '\0';
    ds_err err;
    assert_null(parse(deep, &err));
    assert_non_null(strstr(err.msg, "nested too deeply"));
}

/* Every prefix and every single-byte change of a valid document either parses or is
 * refused; under ASan this shows no read past the input and no leak on any error path. */
static void test_json_mutations(void **state) {
    (void)state;
    const char *doc = "{\"format\":\"x\",\"arrays\":[{\"name\":\"s\\\"0\",\"numel\":12,"
                      "\"ranges\":[{\"rank\":0,\"begin\":0,\"end\":12}]}],\"e\":[1.5e-3,\"\\u00e9\"]}";
    size_t n = strlen(doc);
    char *buf = malloc(n);
    for (size_t cut = 0; cut <= n; cut++) {
        memcpy(buf, doc, cut);
        ds_err err;
        ds_ckj_free(ds_ckj_parse(buf, cut, &err));
    }
    const char subst[] = "{}[]\",:\\u0e-9 ";
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof subst - 1; k++) {
            memcpy(buf, doc, n);
            buf[i] = subst[k];
            ds_err err;
            ds_ckj_free(ds_ckj_parse(buf, n, &err));
        }
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc_known_vector),
        cmocka_unit_test(test_crc_paths_agree_and_chain),
        cmocka_unit_test(test_json_valid),
        cmocka_unit_test(test_json_hostile),
        cmocka_unit_test(test_json_mutations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
