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
    assert_int_equal(ds_fd_budget(1000), 1000L * DS_FDS_PER_NODE + DS_FDS_PER_JOB);
    assert_int_equal(ds_fd_budget_fits(1000, 20000, &err), 0);
    assert_int_equal(ds_fd_budget_fits(3000, 20000, &err), 0);
    assert_int_equal(ds_fd_budget_fits(4000, 1024, &err), -1);
    assert_non_null(strstr(err.msg, "4000 nodes need about 20192 open files"));
    assert_non_null(strstr(err.msg, "its limit is 1024: raise it"));
    assert_int_equal(ds_fd_budget_check(1, &err), 0); /* this process can hold one node */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_fits_or_says_what_to_do)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
