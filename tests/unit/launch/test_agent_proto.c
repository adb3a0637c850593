/* The controller <-> agent framing: frames survive any split of the byte stream, and a
 * malformed stream is refused rather than misread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent_proto.h"

static void frames_survive_byte_by_byte_delivery(void **state) {
    (void)state;
    ds_buf out = {0};
    assert_int_equal(ds_frame_append(&out, DS_FRAME_CONFIG, 0, "job=x", 5), 0);
    assert_int_equal(ds_frame_append(&out, DS_FRAME_STDOUT, 70000, "a\0b\n", 4), 0);
    assert_int_equal(ds_frame_append(&out, DS_FRAME_GO, 0, NULL, 0), 0);
    ds_buf in = {0};
    int seen = 0;
    for (size_t i = 0; i < out.len; i++) {
        ds_buf_put(&in, out.data + i, 1);
        ds_frame f;
        int p;
        while ((p = ds_frame_parse(&in, &f)) == 1) {
            if (seen == 0) {
                assert_int_equal(f.type, DS_FRAME_CONFIG);
                assert_memory_equal(f.payload, "job=x", 5);
            } else if (seen == 1) {
                assert_int_equal(f.type, DS_FRAME_STDOUT);
                assert_int_equal(f.rank, 70000);
                assert_int_equal(f.len, 4);
                assert_memory_equal(f.payload, "a\0b\n", 4);
            } else {
                assert_int_equal(f.type, DS_FRAME_GO);
                assert_int_equal(f.len, 0);
            }
            seen++;
            ds_buf_consume(&in, DS_FRAME_HEADER + f.len);
        }
        assert_int_equal(p, 0);
    }
    assert_int_equal(seen, 3);
    assert_int_equal(in.len, 0);
    ds_buf_free(&in);
    ds_buf_free(&out);
}

static void unknown_type_and_oversized_payload_are_refused(void **state) {
    (void)state;
    ds_buf in = {0};
    unsigned char bad_type[DS_FRAME_HEADER] = {99, 0, 0, 0, 0, 0, 0, 0, 0};
    ds_buf_put(&in, bad_type, sizeof bad_type);
    ds_frame f;
    assert_int_equal(ds_frame_parse(&in, &f), -1);
    in.len = 0;
    unsigned char too_big[DS_FRAME_HEADER] = {DS_FRAME_STDOUT, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff};
    ds_buf_put(&in, too_big, sizeof too_big);
    assert_int_equal(ds_frame_parse(&in, &f), -1);
    ds_buf_free(&in);
    ds_buf out = {0};
    static char big[DS_FRAME_MAX_PAYLOAD + 1];
    assert_int_equal(ds_frame_append(&out, DS_FRAME_STDOUT, 0, big, sizeof big), -1);
    ds_buf_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(frames_survive_byte_by_byte_delivery),
        cmocka_unit_test(unknown_type_and_oversized_payload_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
