/* The building blocks: CRC-32C (hardware and table agree, known vector) and the canonical
 * JSON form whose checksum meta.json records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "crc32c.h"
#include "ds_json_read.h"

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

/* meta.json records the checksum of the engine's object in its canonical form (the JSON
 * reader's tree written back compactly): that form must be a fixed point of parse + emit.
 * The reader itself is tested in tests/unit/common/test_json_read.c. */
static void test_json_canonical(void **state) {
    (void)state;
    const char *src = " {\"a\": [1, -2.5e3, true, false, null], \"s\": \"x\\u00e9\\ud83d\\ude00\\n\","
                      " \"big\": 9007199254740993, \"o\": {}} ";
    ds_err err = {""};
    ds_jv *v = ds_jv_parse(src, strlen(src), &err);
    if (!v) fail_msg("%s", err.msg);
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_jv_emit(&j, v);
    assert_string_equal(j.buf, "{\"a\":[1,-2500,true,false,null],\"s\":\"x\xc3\xa9\xf0\x9f\x98\x80\\n\","
                               "\"big\":9007199254740993,\"o\":{}}");
    ds_jv *v2 = ds_jv_parse(j.buf, j.len, &err);
    if (!v2) fail_msg("%s", err.msg);
    ds_json j2;
    ds_json_init_buf(&j2, 0);
    ds_jv_emit(&j2, v2);
    assert_string_equal(j.buf, j2.buf);
    free(j.buf);
    free(j2.buf);
    ds_jv_free(v);
    ds_jv_free(v2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc_known_vector),
        cmocka_unit_test(test_crc_paths_agree_and_chain),
        cmocka_unit_test(test_json_canonical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
