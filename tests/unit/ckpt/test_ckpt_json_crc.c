/* The building blocks: CRC-32C (hardware and table agree, known vector). The canonical
 * JSON form whose checksum meta.json records is tested with the reader, in
 * tests/unit/common/test_json_read.c (test_emit_round_trip). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc_known_vector),
        cmocka_unit_test(test_crc_paths_agree_and_chain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
