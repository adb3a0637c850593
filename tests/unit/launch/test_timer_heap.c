/* timer_heap: timers come out earliest first, however they went in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>

#include <cmocka.h>

#include "timer_heap.h"

static void test_earliest_first(void **state) {
    (void)state;
    ds_timer_heap h = {0};
    assert_null(ds_timer_heap_top(&h));
    srand(7);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(ds_timer_heap_push(&h, (ds_timer){.at = rand() % 500, .node = i}), 0);
    long long last = -1;
    for (int i = 0; i < 600; i++) { /* half out, more in, the rest out */
        ds_timer t = ds_timer_heap_pop(&h);
        assert_true(t.at >= last);
        last = t.at;
    }
    for (int i = 0; i < 100; i++) assert_int_equal(ds_timer_heap_push(&h, (ds_timer){.at = last + rand() % 50}), 0);
    assert_int_equal(h.n, 500);
    while (h.n) {
        assert_true(ds_timer_heap_top(&h)->at >= last);
        last = ds_timer_heap_pop(&h).at;
    }
    ds_timer_heap_free(&h);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_earliest_first)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
