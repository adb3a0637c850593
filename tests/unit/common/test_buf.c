/* The byte buffer every wire protocol and text builder uses: unread bytes after partial
 * consumption, the front reclaimed without moving what a caller located relative to it,
 * the terminating NUL, and a store frame whose length is patched after the buffer moved
 * its bytes (a reply queued behind a half-sent one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ds_buf.h"
#include "store_proto.h"

static void test_put_consume_text(void **state) {
    (void)state;
    ds_buf b = {0};
    assert_string_equal(ds_buf_str(&b), "");
    assert_int_equal(ds_buf_puts(&b, "hello "), 0);
    assert_int_equal(ds_buf_printf(&b, "%s %d", "world", 42), 0);
    assert_string_equal(ds_buf_str(&b), "hello world 42");
    ds_buf_consume(&b, 6);
    assert_int_equal(ds_buf_unread(&b), 8);
    assert_string_equal(ds_buf_str(&b), "world 42");
    ds_buf_clear(&b);
    assert_int_equal(ds_buf_unread(&b), 0);
    assert_string_equal(ds_buf_str(&b), "");
    assert_int_equal(b.oom, 0);
    ds_buf_free(&b);
}

/* Growing after a partial consume moves the unread bytes to the front: their content
 * and their offsets relative to off stay the same. */
static void test_reclaim_keeps_unread(void **state) {
    (void)state;
    ds_buf b = {0};
    uint8_t chunk[200];
    for (size_t i = 0; i < sizeof chunk; i++) chunk[i] = (uint8_t)i;
    assert_int_equal(ds_buf_put(&b, chunk, sizeof chunk), 0);
    size_t cap = b.cap;
    ds_buf_consume(&b, 150);
    assert_int_equal(ds_buf_put(&b, chunk, cap - 60), 0); /* needs the front back */
    assert_int_equal(b.off, 0);
    assert_int_equal(b.cap, cap);
    assert_memory_equal(ds_buf_head(&b), chunk + 150, 50);
    assert_memory_equal(ds_buf_head(&b) + 50, chunk, cap - 60);
    ds_buf_free(&b);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* A reply frame begun while the buffer holds a half-sent one: whether or not the body
 * makes the buffer reclaim its front, the length lands in the new frame's header. */
static void frame_after_partial_send(size_t body_len) {
    ds_buf b = {0};
    uint8_t body[300];
    memset(body, 'x', sizeof body);
    assert_int_equal(ds_buf_put(&b, body, 250), 0);
    ds_buf_consume(&b, 200); /* 50 bytes still to send */
    size_t start = ds_buf_unread(&b);
    assert_int_equal(ds_frame_begin(&b, DS_STORE_OK), 0);
    assert_int_equal(ds_buf_put(&b, body, body_len), 0);
    ds_frame_end(&b, start);
    const uint8_t *frame = ds_buf_head(&b) + start;
    assert_int_equal(be32(frame), 1 + body_len);
    assert_int_equal(frame[4], DS_STORE_OK);
    assert_int_equal(ds_buf_unread(&b), 50 + 4 + 1 + body_len);
    ds_buf_free(&b);
}

static void test_frame_patched_after_reclaim(void **state) {
    (void)state;
    frame_after_partial_send(300); /* outgrows the 256-byte buffer: the front is reclaimed */
    frame_after_partial_send(1);   /* fits: the bytes stay where they are */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_consume_text),
        cmocka_unit_test(test_reclaim_keeps_unread),
        cmocka_unit_test(test_frame_patched_after_reclaim),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
