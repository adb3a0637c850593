/* fd_budget: a job that cannot fit the descriptor limit is refused before it starts,
 * with the figure to raise the limit to; the budget does not depend on ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "fd_budget.h"

static void test_fits_or_says_what_to_do(void **state) {
    (void)state;
    ds_err err = {{0}};
    assert_int_equal(ds_fd_budget(1000, 0), 1000L * DS_FDS_PER_NODE + DS_FDS_PER_JOB);
    assert_int_equal(ds_fd_budget_fits(1000, 0, 20000, &err), 0);
    assert_int_equal(ds_fd_budget_fits(3000, 0, 20000, &err), 0);
    assert_int_equal(ds_fd_budget_fits(4000, 0, 1024, &err), -1);
    assert_non_null(strstr(err.msg, "4000 nodes need about 20192 open files"));
    assert_non_null(strstr(err.msg, "its limit is 1024: raise it"));
    assert_int_equal(ds_fd_budget_check(1, 0, &err), 0); /* this process can hold one node */
}

/* Through relays a node's pipes are held twice (the loop's ends and the relay thread's). */
static void test_relayed_nodes_cost_more(void **state) {
    (void)state;
    ds_err err = {{0}};
    assert_int_equal(ds_fd_budget(1000, 1), 1000L * DS_FDS_PER_RELAYED_NODE + DS_FDS_PER_JOB);
    assert_int_equal(ds_fd_budget_fits(2900, 0, 20000, &err), 0);
    assert_int_equal(ds_fd_budget_fits(2900, 1, 20000, &err), -1);
    assert_non_null(strstr(err.msg, "2900 nodes need about 20492 open files in the controller (7 per node + 192)"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fits_or_says_what_to_do),
                                       cmocka_unit_test(test_relayed_nodes_cost_more)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
