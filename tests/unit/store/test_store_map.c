/* The store's key/value table on its own: the server's tests reach it only through a
 * socket, and never with enough keys to make it grow many times. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store_map.h"

static uint8_t *dup_bytes(const char *s) {
    size_t n = strlen(s);
    uint8_t *p = malloc(n ? n : 1);
    assert_non_null(p);
    memcpy(p, s, n);
    return p;
}

static void put_str(ds_store_map *m, const char *key, const char *val) {
    assert_int_equal(ds_store_map_put(m, key, strlen(key), dup_bytes(val), strlen(val)), 0);
}

static void assert_value(const ds_store_map *m, const void *key, size_t klen, const char *want) {
    ds_store_entry *e = ds_store_map_get(m, key, klen);
    assert_non_null(e);
    assert_int_equal(e->vlen, strlen(want));
    assert_memory_equal(e->val, want, e->vlen);
}

static void test_put_get_overwrite_delete(void **state) {
    (void)state;
    ds_store_map m;
    assert_int_equal(ds_store_map_init(&m), 0);
    assert_null(ds_store_map_get(&m, "a", 1));
    put_str(&m, "a", "1");
    put_str(&m, "ab", "2");
    assert_value(&m, "a", 1, "1");
    assert_value(&m, "ab", 2, "2");
    put_str(&m, "a", "one");
    assert_value(&m, "a", 1, "one");
    assert_int_equal(m.nentries, 2);
    assert_string_equal(ds_store_map_get(&m, "ab", 2)->key, "ab"); /* NUL-terminated */
    assert_int_equal(ds_store_map_delete(&m, "a", 1), 1);
    assert_int_equal(ds_store_map_delete(&m, "a", 1), 0);
    assert_null(ds_store_map_get(&m, "a", 1));
    assert_value(&m, "ab", 2, "2");
    assert_int_equal(m.nentries, 1);
    ds_store_map_free(&m);
}

/* Keys are bytes: a prefix, or the same bytes with an embedded NUL, is another key. */
static void test_keys_are_byte_strings(void **state) {
    (void)state;
    ds_store_map m;
    assert_int_equal(ds_store_map_init(&m), 0);
    assert_int_equal(ds_store_map_put(&m, "k\0x", 3, dup_bytes("nul"), 3), 0);
    assert_int_equal(ds_store_map_put(&m, "k", 1, dup_bytes("short"), 5), 0);
    assert_value(&m, "k\0x", 3, "nul");
    assert_value(&m, "k", 1, "short");
    assert_null(ds_store_map_get(&m, "k\0", 2));
    assert_int_equal(ds_store_map_put(&m, "empty", 5, dup_bytes(""), 0), 0);
    assert_value(&m, "empty", 5, "");
    ds_store_map_free(&m);
}

/* 20000 keys: the table doubles several times and every key still finds its value. */
static void test_growth_keeps_every_key(void **state) {
    (void)state;
    enum { N = 20000 };
    ds_store_map m;
    assert_int_equal(ds_store_map_init(&m), 0);
    size_t initial = m.nbuckets;
    char key[32], val[32];
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "rank/%d/addr", i);
        snprintf(val, sizeof val, "10.0.%d.%d", i / 256, i % 256);
        put_str(&m, key, val);
    }
    assert_int_equal(m.nentries, N);
    assert_true(m.nbuckets >= N && m.nbuckets > initial);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "rank/%d/addr", i);
        snprintf(val, sizeof val, "10.0.%d.%d", i / 256, i % 256);
        assert_value(&m, key, strlen(key), val);
    }
    for (int i = 0; i < N; i += 2) {
        snprintf(key, sizeof key, "rank/%d/addr", i);
        assert_int_equal(ds_store_map_delete(&m, key, strlen(key)), 1);
    }
    assert_int_equal(m.nentries, N / 2);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof key, "rank/%d/addr", i);
        ds_store_entry *e = ds_store_map_get(&m, key, strlen(key));
        if (i % 2) assert_non_null(e);
        else assert_null(e);
    }
    ds_store_map_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_get_overwrite_delete),
        cmocka_unit_test(test_keys_are_byte_strings),
        cmocka_unit_test(test_growth_keeps_every_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
