/* Root cause: failure records parse (and bad ones are refused), and the pick is the
 * earliest failure that is not a consequence, whatever order they are listed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "failure.h"

static void record_parses(void **state) {
    (void)state;
    const char *json = "{\"rank\":3,\"host\":\"n2\",\"time_ms\":1700000000123,\"kind\":\"lua\","
                       "\"transport\":true,\"message\":\"train.lua:3: boom\",\"traceback\":\"stack traceback:\\n\\t[C]\"}";
    ds_failure_record r;
    ds_err err = {{0}};
    assert_int_equal(ds_failure_record_parse(&r, json, strlen(json), &err), 0);
    assert_string_equal(r.kind, "lua");
    assert_true(r.transport);
    assert_true(r.at_ms == 1700000000123LL);
    assert_string_equal(r.message, "train.lua:3: boom");
    assert_string_equal(r.traceback, "stack traceback:\n\t[C]");
    ds_failure_record_free(&r);
}

static void bad_records_refused(void **state) {
    (void)state;
    const char *bad[] = {
        "", "{", "[]", "{\"kind\":\"lua\",\"message\":\"m\"}",                 /* no time */
        "{\"kind\":\"lua\",\"time_ms\":1.5,\"message\":\"m\"}",                   /* time not an integer */
        "{\"kind\":\"averyveryverylongkind\",\"time_ms\":1,\"message\":\"m\"}", /* kind too long */
        "{\"kind\":\"lua\",\"time_ms\":1}",                                      /* no message */
        "{\"kind\":{\"a\":{\"b\":1}},\"time_ms\":1,\"message\":\"m\"}",           /* too deep */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ds_failure_record r;
        ds_err err = {{0}};
        assert_int_equal(ds_failure_record_parse(&r, bad[i], strlen(bad[i]), &err), -1);
        assert_true(err.msg[0] != 0);
        assert_null(r.message);
    }
}

static ds_failure F(int rank, long long at, int consequence) {
    ds_failure f = {.rank = rank, .node = -1, .at_ms = at, .consequence = consequence};
    return f;
}

static void earliest_cause_wins(void **state) {
    (void)state;
    /* Heard in this order: a peer's connection error first, the real error later. */
    ds_failure f[] = {F(0, 1005, 1), F(2, 1100, 0), F(1, 1000, 0), F(3, 1010, 1)};
    assert_int_equal(ds_failure_pick_root(f, 4), 2);
    /* A consequence earlier than every cause is still not the root. */
    ds_failure g[] = {F(0, 900, 1), F(1, 1000, 0)};
    assert_int_equal(ds_failure_pick_root(g, 2), 1);
    /* Only consequences: the earliest of them. */
    ds_failure h[] = {F(0, 1200, 1), F(1, 1100, 1), F(2, 1300, 1)};
    assert_int_equal(ds_failure_pick_root(h, 3), 1);
    /* An unknown time sorts after every known one. */
    ds_failure k[] = {F(0, 0, 0), F(1, 5000, 0)};
    assert_int_equal(ds_failure_pick_root(k, 2), 1);
    assert_int_equal(ds_failure_pick_root(k, 0), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_parses),
        cmocka_unit_test(bad_records_refused),
        cmocka_unit_test(earliest_cause_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
