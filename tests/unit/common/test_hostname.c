/* ds_hostname, in a private UTS namespace so the test sets the name it reads: a name
 * that fits, one that does not (the fallback, never a cut name), an empty one, and a
 * fallback cut to the buffer. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "ds_hostname.h"

static int own_uts; /* 1: this process has its own UTS namespace (needs root, as CI is) */

static void set_name(const char *name) {
    if (!own_uts) skip();
    assert_int_equal(sethostname(name, strlen(name)), 0);
}

static void test_name_that_fits(void **state) {
    (void)state;
    set_name("node-7");
    char buf[64];
    assert_string_equal(ds_hostname(buf, sizeof buf, "?"), "node-7");
    assert_string_equal(ds_hostname(buf, 7, "?"), "node-7"); /* exactly fits with its NUL */
}

static void test_name_too_long_gives_fallback(void **state) {
    (void)state;
    set_name("node-7");
    char buf[6];
    assert_string_equal(ds_hostname(buf, sizeof buf, "?"), "?");
    char full[65];
    memset(full, 'a', 64);
    full[64] = '\0';
    set_name(full); /* the longest name Linux takes */
    char big[65];
    assert_string_equal(ds_hostname(big, sizeof big, "?"), full);
    assert_string_equal(ds_hostname(big, 64, "?"), "?");
}

static void test_empty_name_gives_fallback(void **state) {
    (void)state;
    set_name("");
    char buf[32];
    assert_string_equal(ds_hostname(buf, sizeof buf, "localhost"), "localhost");
    assert_string_equal(ds_hostname(buf, sizeof buf, ""), "");
}

static void test_fallback_cut_to_buffer(void **state) {
    (void)state;
    set_name("");
    char buf[4];
    assert_string_equal(ds_hostname(buf, sizeof buf, "localhost"), "loc");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_that_fits),
        cmocka_unit_test(test_name_too_long_gives_fallback),
        cmocka_unit_test(test_empty_name_gives_fallback),
        cmocka_unit_test(test_fallback_cut_to_buffer),
    };
    own_uts = unshare(CLONE_NEWUTS) == 0;
    return cmocka_run_group_tests(tests, NULL, NULL);
}
