/* TensorBoard event files: what ds_tfevents writes, an independent reader
 * (tfrecord_read.c: its own CRC-32C and protocol-buffer decoding) reads back, every
 * step, time, tag and value; a flipped byte anywhere is caught by a checksum. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tfevents.h"
#include "tfrecord_read.h"

static void crc32c_of_the_standard_check_string(void **state) {
    (void)state;
    assert_int_equal(tf_crc32c("123456789", 9), 0xe3069283u); /* RFC 3720's check value */
    assert_int_equal(tf_crc32c("", 0), 0);
}

static char *write_events(char *dir, int steps) {
    strcpy(dir, "/tmp/ds-test-tfevents.XXXXXX");
    assert_non_null(mkdtemp(dir));
    ds_err err = {{0}};
    ds_tfevents *w = ds_tfevents_open(dir, &err);
    assert_non_null(w);
    char *path = strdup(ds_tfevents_path(w));
    for (int s = 1; s <= steps; s++) {
        ds_tf_scalar v[3] = {{"loss", 5.0f / (float)s}, {"mem/params/peak/max", 1e9f + (float)s}, {"lr", -0.0f}};
        assert_int_equal(ds_tfevents_write(w, s * 10, 1.7e9 + s, v, 3, &err), 0);
    }
    /* an event with no values at all, and a huge step number */
    assert_int_equal(ds_tfevents_write(w, (int64_t)1 << 40, 1.8e9, NULL, 0, &err), 0);
    ds_tfevents_close(w);
    return path;
}

static void cleanup(const char *dir, char *path) {
    unlink(path);
    rmdir(dir);
    free(path);
}

static void every_value_reads_back(void **state) {
    (void)state;
    char dir[64];
    char *path = write_events(dir, 50);
    assert_non_null(strstr(path, "/events.out.tfevents."));
    tf_events e;
    char why[200] = "";
    int rc = tf_read(path, &e, why, sizeof why);
    if (rc) fail_msg("%s", why);
    assert_string_equal(e.version, "brain.Event:2");
    assert_int_equal(e.nevents, 1 + 50 + 1);
    assert_int_equal(e.n, 3 * 50);
    for (int s = 1; s <= 50; s++) {
        const tf_scalar *v = &e.v[3 * (s - 1)];
        for (int k = 0; k < 3; k++) {
            assert_int_equal(v[k].step, s * 10);
            assert_true(v[k].wall_time == 1.7e9 + s);
        }
        assert_string_equal(v[0].tag, "loss");
        assert_true(v[0].value == 5.0f / (float)s);
        assert_string_equal(v[1].tag, "mem/params/peak/max");
        assert_true(v[1].value == 1e9f + (float)s);
        assert_string_equal(v[2].tag, "lr");
        assert_true(v[2].value == 0.0f && signbit(v[2].value));
    }
    tf_events_free(&e);
    cleanup(dir, path);
}

static void a_flipped_byte_is_caught(void **state) {
    (void)state;
    char dir[64];
    char *path = write_events(dir, 3);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    unsigned char *orig = malloc((size_t)size);
    rewind(f);
    assert_int_equal(fread(orig, 1, (size_t)size, f), size);
    fclose(f);
    for (long at = 0; at < size; at++) {
        unsigned char *b = malloc((size_t)size);
        memcpy(b, orig, (size_t)size);
        b[at] ^= 0x10;
        f = fopen(path, "wb");
        fwrite(b, 1, (size_t)size, f);
        fclose(f);
        tf_events e;
        char why[200];
        if (tf_read(path, &e, why, sizeof why) == 0) fail_msg("byte %ld flipped, read without complaint", at);
        tf_events_free(&e);
        free(b);
    }
    free(orig);
    cleanup(dir, path);
}

static void an_unwritable_directory_is_an_error(void **state) {
    (void)state;
    ds_err err = {{0}};
    assert_null(ds_tfevents_open("/nonexistent/dir", &err));
    assert_non_null(strstr(err.msg, "/nonexistent/dir/events.out.tfevents."));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crc32c_of_the_standard_check_string),
        cmocka_unit_test(every_value_reads_back),
        cmocka_unit_test(a_flipped_byte_is_caught),
        cmocka_unit_test(an_unwritable_directory_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
