/* The progress line: what it says, the ETA from the recent rate, plain lines every
 * steps_per_print steps when not on a terminal, a line redrawn in place on one, stepping
 * aside for other output. Output goes to a pipe the test reads. */
#include <fcntl.h>
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

#include "progress.h"

static const char *const CATS[] = {"params", "total"};

static ds_metrics_row row_at(long long step, int total) {
    ds_metrics_row r = {.step = step, .total_steps = total, .nranks = 4, .loss = 2.34567, .tokens_per_s = 52100,
                        .ncats = 2, .cats = CATS};
    r.compute = (ds_stat){.rank0 = 1, .min = 1, .median = 1, .max = 1.25, .max_rank = 3};
    r.mem_peak[1] = (ds_stat){.max = 210.5 * 1024 * 1024};
    r.mem_peak[0] = (ds_stat){.max = NAN};
    return r;
}

static void the_line_says_it_all(void **state) {
    (void)state;
    char b[300];
    ds_metrics_row r = row_at(120, 300);
    ds_progress_format(b, sizeof b, &r, 65, 1);
    assert_string_equal(b, "step 120/300 (40%) | loss 2.3457 | 52.1k tok/s | ETA 1m05s | mem 210.5 MiB | "
                           "slowest rank 3 (+25%) | restarts 1");
    r = row_at(7, 0);
    r.nranks = 1;
    r.loss = NAN;
    r.tokens_per_s = 950;
    r.skipped_total = 4;
    r.mem_peak[1].max = 512;
    ds_progress_format(b, sizeof b, &r, -1, 0);
    assert_string_equal(b, "step 7 | 950 tok/s | mem 512 B | skipped 4 | restarts 0");
    char small[16];
    ds_progress_format(small, sizeof small, &r, -1, 0); /* cut, still a string */
    assert_string_equal(small, "step 7 | 950 to");
    ds_progress_duration(b, sizeof b, 3725);
    assert_string_equal(b, "1h02m");
    ds_progress_duration(b, sizeof b, 42.4);
    assert_string_equal(b, "42s");
}

static char *drain(int fd) {
    static char buf[65536];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

static void plain_lines_every_n_steps_and_the_last(void **state) {
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    ds_progress *pr = ds_progress_new(p[1], 0, 4);
    for (int s = 1; s <= 10; s++) {
        ds_metrics_row r = row_at(s, 10);
        ds_progress_row(pr, &r, s * 2.0, 0); /* 2 s a step */
    }
    ds_progress_hide(pr); /* nothing drawn in place: no-ops */
    ds_progress_show(pr);
    ds_progress_end(pr);
    char *out = drain(p[0]);
    assert_non_null(strstr(out, "dslaunch: step 4/10 (40%) | loss 2.3457 | 52.1k tok/s | ETA 12s |"));
    assert_non_null(strstr(out, "dslaunch: step 8/10 (80%)"));
    assert_non_null(strstr(out, "dslaunch: step 10/10 (100%)"));
    assert_non_null(strstr(out, "ETA 0s"));
    int lines = 0;
    for (char *c = out; *c; c++) lines += *c == '\n';
    assert_int_equal(lines, 3);
    assert_null(strchr(out, '\r'));
    ds_progress_free(pr);
    close(p[0]);
    close(p[1]);
}

/* Rows read in one batch share one elapsed time: no rate, so no ETA before the last
 * step, and "ETA 0s" at it (nothing is left whatever the rate). */
static void the_last_step_has_eta_0_without_a_rate(void **state) {
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    ds_progress *pr = ds_progress_new(p[1], 0, 2);
    for (int s = 1; s <= 4; s++) {
        ds_metrics_row r = row_at(s, 4);
        ds_progress_row(pr, &r, 0.5, 0);
    }
    ds_progress_end(pr);
    char *out = drain(p[0]);
    assert_non_null(strstr(out, "dslaunch: step 2/4 (50%) | loss 2.3457 | 52.1k tok/s | mem"));
    assert_non_null(strstr(out, "dslaunch: step 4/4 (100%) | loss 2.3457 | 52.1k tok/s | ETA 0s |"));
    ds_progress_free(pr);
    close(p[0]);
    close(p[1]);
}

static void on_a_terminal_one_line_redrawn_in_place(void **state) {
    (void)state;
    int p[2];
    assert_int_equal(pipe2(p, O_NONBLOCK), 0);
    ds_progress *pr = ds_progress_new(p[1], 1, 4);
    ds_metrics_row r = row_at(1, 2);
    ds_progress_row(pr, &r, 1, 0);
    /* cut to the width of the terminal, less one column (a pipe's: 80) */
    assert_string_equal(drain(p[0]), "\r\033[Kstep 1/2 (50%) | loss 2.3457 | 52.1k tok/s | mem 210.5 MiB | "
                                     "slowest rank 3 (+2");
    ds_progress_hide(pr);
    assert_string_equal(drain(p[0]), "\r\033[K");
    ds_progress_hide(pr); /* already hidden */
    assert_string_equal(drain(p[0]), "");
    ds_progress_show(pr);
    assert_non_null(strstr(drain(p[0]), "\r\033[Kstep 1/2"));
    r = row_at(2, 2); /* the last step is drawn at once, whatever the time since the last */
    ds_progress_row(pr, &r, 2, 0);
    assert_non_null(strstr(drain(p[0]), "\r\033[Kstep 2/2 (100%)"));
    ds_progress_end(pr);
    char *out = drain(p[0]);
    assert_non_null(strstr(out, "step 2/2"));
    assert_int_equal(out[strlen(out) - 1], '\n');
    ds_progress_hide(pr); /* ended: the line stays */
    assert_string_equal(drain(p[0]), "");
    ds_progress_free(pr);
    close(p[0]);
    close(p[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_line_says_it_all),
        cmocka_unit_test(plain_lines_every_n_steps_and_the_last),
        cmocka_unit_test(the_last_step_has_eta_0_without_a_rate),
        cmocka_unit_test(on_a_terminal_one_line_redrawn_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
