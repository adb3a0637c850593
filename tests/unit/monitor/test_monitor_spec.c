/* The job spec's [monitor] section: defaults, every key, and the errors naming file,
 * line and key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "jobspec.h"

#define MIN "[job]\nname = j\nscript = s.lua\n"

static void defaults_are_every_output_and_no_endpoint(void **state) {
    (void)state;
    ds_jobspec s;
    ds_err err = {{0}};
    assert_int_equal(ds_jobspec_parse(&s, "/jobs/job.ini", MIN, &err), 0);
    assert_int_equal(s.monitor_outputs, DS_MONITOR_JSONL | DS_MONITOR_TENSORBOARD | DS_MONITOR_REPORT | DS_MONITOR_PROGRESS);
    assert_int_equal(s.steps_per_print, 10);
    assert_int_equal(s.metrics_port, -1);
    assert_null(s.metrics_addr);
    ds_jobspec_free(&s);
}

static void every_key(void **state) {
    (void)state;
    ds_jobspec s;
    ds_err err = {{0}};
    assert_int_equal(ds_jobspec_parse(&s, "/jobs/job.ini",
                                      MIN "[monitor]\noutputs = report, jsonl progress\nsteps_per_print = 50\n"
                                          "metrics_port = 9400\nmetrics_addr = 0.0.0.0\n", &err), 0);
    assert_int_equal(s.monitor_outputs, DS_MONITOR_JSONL | DS_MONITOR_REPORT | DS_MONITOR_PROGRESS);
    assert_int_equal(s.steps_per_print, 50);
    assert_int_equal(s.metrics_port, 9400);
    assert_string_equal(s.metrics_addr, "0.0.0.0");
    ds_jobspec_free(&s);
    assert_int_equal(ds_jobspec_parse(&s, "/jobs/job.ini", MIN "[monitor]\noutputs = none\nmetrics_port = 0\n", &err), 0);
    assert_int_equal(s.monitor_outputs, 0);
    assert_int_equal(s.metrics_port, 0);
    ds_jobspec_free(&s);
}

static void expect_err(const char *text, const char *want) {
    ds_jobspec s;
    ds_err err = {{0}};
    assert_int_equal(ds_jobspec_parse(&s, "/jobs/job.ini", text, &err), -1);
    if (!strstr(err.msg, want)) fail_msg("got '%s', expected '%s'", err.msg, want);
}

static void bad_values_name_the_line_and_key(void **state) {
    (void)state;
    expect_err(MIN "[monitor]\noutputs = report, csv\n",
               "/jobs/job.ini:5: [monitor] outputs: 'csv' is unknown or repeated; expected none, or some of "
               "jsonl|tensorboard|report|progress separated by commas");
    expect_err(MIN "[monitor]\noutputs = report report\n", ":5: [monitor] outputs: 'report' is unknown or repeated");
    expect_err(MIN "[monitor]\noutputs = none, report\n", "'none' is unknown");
    expect_err(MIN "[monitor]\noutputs = \n", ":5: [monitor] outputs: empty value");
    expect_err(MIN "[monitor]\nsteps_per_print = 0\n", ":5: [monitor] steps_per_print: 0 is out of range");
    expect_err(MIN "[monitor]\nmetrics_port = 70000\n", ":5: [monitor] metrics_port: 70000 is out of range; expected an integer in 0..65535");
    expect_err(MIN "[monitor]\nport = 1\n", "[monitor] port: unknown key (expected one of: outputs, steps_per_print, metrics_port, metrics_addr)");
    expect_err(MIN "[monitors]\n", "[monitors]: unknown section (expected one of: job, resources, ");
    expect_err(MIN "[monitors]\n", ", monitor"); /* the section it meant is listed */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_every_output_and_no_endpoint),
        cmocka_unit_test(every_key),
        cmocka_unit_test(bad_values_name_the_line_and_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
