/* log_files: many files through few descriptors, contents as if each were always open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log_files.h"

static void read_file(const char *path, char *buf, size_t cap) {
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t n = fread(buf, 1, cap - 1, fp);
    buf[n] = 0;
    fclose(fp);
}

static void test_bounded_descriptors(void **state) {
    (void)state;
    char dir[] = "/tmp/ds-log-files-XXXXXX";
    assert_non_null(mkdtemp(dir));
    ds_log_files *f = ds_log_files_new(2, 0600);
    ds_err err;
    int idx[5];
    char path[5][128];
    for (int i = 0; i < 5; i++) {
        snprintf(path[i], sizeof path[i], "%s/f%d", dir, i);
        FILE *old = fopen(path[i], "w"); /* a previous run's file is truncated */
        fputs("stale", old);
        fclose(old);
        idx[i] = ds_log_files_add(f, path[i], &err);
        assert_int_equal(idx[i], i);
    }
    assert_int_equal(ds_log_files_nopen(f), 0);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 4; i++) { /* f4 is never written */
            char line[32];
            int n = snprintf(line, sizeof line, "%d.%d\n", i, round);
            assert_int_equal(ds_log_files_write(f, idx[i], line, (size_t)n), 0);
            assert_true(ds_log_files_nopen(f) <= 2);
        }
    assert_int_equal(ds_log_files_write(f, 7, "x", 1), -1);
    ds_log_files_free(f);
    for (int i = 0; i < 5; i++) {
        char got[128], want[128] = "";
        read_file(path[i], got, sizeof got); /* f4: created empty at the end */
        if (i < 4) snprintf(want, sizeof want, "%d.0\n%d.1\n%d.2\n", i, i, i);
        assert_string_equal(got, want);
        unlink(path[i]);
    }
    rmdir(dir);
    f = ds_log_files_new(1, 0600);
    assert_int_equal(ds_log_files_add(f, "/nonexistent-dir/x", &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x"));
    ds_log_files_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_bounded_descriptors)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
