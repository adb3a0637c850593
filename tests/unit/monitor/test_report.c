/* report.html's data: the page is written whole with the run's JSON inside (read back
 * here from the page), "</" in any text cannot end the script early, curves keep at
 * most DS_REPORT_MAX_POINTS points on long runs, and only a live page reloads itself.
 * (tests/integration/monitor draws it in a real browser.) */
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

#include "ds_json_read.h"
#include "ds_textfile.h"
#include "report.h"

static const char *const CATS[] = {"params", "total"};

static ds_metrics_row row_at(long long step, const double *compute, const double *peaks) {
    ds_metrics_row r = {.step = step, .nranks = 2, .loss = 10.0 / (double)step, .lr = 0.5, .tokens_per_s = 100,
                        .skipped = step == 3, .skipped_total = step >= 3, .loss_scale = 512, .ncats = 2, .cats = CATS};
    r.rank_step_time = compute;
    r.rank_compute = compute;
    r.rank_mem_cur = peaks;
    r.rank_mem_peak = peaks;
    return r;
}

/* The page's JSON, parsed. */
static ds_jv *page_data(const char *path, char **page) {
    ds_err err = {{0}};
    *page = ds_textfile_read(path, "report", 64u << 20, &err);
    assert_non_null(*page);
    const char *open = "<script type=\"application/json\" id=\"data\">";
    char *a = strstr(*page, open);
    assert_non_null(a);
    a += strlen(open);
    char *b = strstr(a, "</script>");
    assert_non_null(b);
    ds_jv *v = ds_jv_parse(a, (size_t)(b - a), &err);
    if (!v) fail_msg("%s", err.msg);
    return v;
}

static void the_page_holds_the_data(void **state) {
    (void)state;
    char dir[] = "/tmp/ds-test-report.XXXXXX", path[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/report.html", dir);
    const char *hosts[2] = {"node-a", "node-b</script><script>alert(1)"};
    ds_report *r = ds_report_new(path, "job-1", 2, hosts);
    double compute[2] = {0.5, 0.75};
    double peaks[2 * DS_METRICS_MAX_CATS];
    for (int i = 0; i < 2 * DS_METRICS_MAX_CATS; i++) peaks[i] = NAN;
    peaks[0] = 100, peaks[1] = 300, peaks[DS_METRICS_MAX_CATS] = 200, peaks[DS_METRICS_MAX_CATS + 1] = 400;
    for (int s = 1; s <= 5; s++) {
        ds_metrics_row row = row_at(s, compute, peaks);
        ds_report_row(r, &row, s);
    }
    ds_report_event ev[1] = {{1.5, "node 0 (x): agent up </script>"}};
    ds_report_state st = {.status = "running", .elapsed = 6, .events = ev, .nevents = 1};
    ds_err err = {{0}};
    assert_int_equal(ds_report_write(r, &st, &err), 0);
    char *page;
    ds_jv *v = page_data(path, &page);
    assert_non_null(strstr(page, "<meta http-equiv=\"refresh\" content=\"10\">"));
    assert_null(strstr(page, "alert(1)</script>")); /* escaped as <\/script> */
    assert_string_equal(ds_jv_get(v, "job")->str, "job-1");
    assert_string_equal(ds_jv_get(v, "status")->str, "running");
    const ds_jv *series = ds_jv_get(v, "series");
    const ds_jv *loss = ds_jv_get(series, "loss"), *step = ds_jv_get(series, "step");
    assert_int_equal(loss->len, 5);
    assert_true(loss->items[4].num == 2.0 && step->items[4].num == 5);
    const ds_jv *ranks = ds_jv_get(v, "ranks");
    assert_string_equal(ds_jv_get(ranks, "hosts")->items[1].str, hosts[1]);
    const ds_jv *cm = ds_jv_get(ranks, "compute_mean"); /* the first step left out */
    assert_true(cm->items[0].num == 0.5 && cm->items[1].num == 0.75);
    const ds_jv *mp = ds_jv_get(ds_jv_get(ranks, "mem_peak"), "total");
    assert_true(mp->items[0].num == 300 && mp->items[1].num == 400);
    assert_int_equal(ds_jv_get(v, "skipped")->len, 1);
    assert_int_equal(ds_jv_get(v, "skipped")->items[0].items[0].inum, 3);
    assert_string_equal(ds_jv_get(v, "events")->items[0].items[1].str, ev[0].text);
    assert_int_equal(ds_jv_get(ds_jv_get(v, "last"), "step")->inum, 5);
    assert_true(ds_jv_get(v, "model")->type == DS_JV_NULL);
    ds_jv_free(v);
    free(page);

    /* the final page does not reload; a long run keeps every k-th step */
    for (int s = 6; s <= 5000; s++) {
        ds_metrics_row row = row_at(s, compute, peaks);
        ds_report_row(r, &row, s);
    }
    st.status = "finished";
    st.final = 1;
    assert_int_equal(ds_report_write(r, &st, &err), 0);
    v = page_data(path, &page);
    assert_null(strstr(page, "http-equiv=\"refresh\""));
    step = ds_jv_get(ds_jv_get(v, "series"), "step");
    int stride = (int)ds_jv_get(v, "stride")->inum;
    assert_true(step->len <= DS_REPORT_MAX_POINTS && step->len > DS_REPORT_MAX_POINTS / 2);
    assert_int_equal(stride, 4);
    for (size_t i = 0; i < step->len; i++) assert_true(step->items[i].num == (double)(1 + (long long)i * stride));
    assert_int_equal(ds_jv_get(v, "rows")->inum, 5000);
    ds_jv_free(v);
    free(page);
    ds_report_free(r);
    unlink(path);
    assert_int_equal(rmdir(dir), 0); /* no temporary file left behind */
}

static void an_unwritable_place_is_an_error(void **state) {
    (void)state;
    const char *hosts[1] = {"h"};
    ds_report *r = ds_report_new("/nonexistent/report.html", "j", 1, hosts);
    ds_report_state st = {.status = "running"};
    ds_err err = {{0}};
    assert_int_equal(ds_report_write(r, &st, &err), -1);
    assert_non_null(strstr(err.msg, "/nonexistent/report.html"));
    ds_report_free(r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_page_holds_the_data),
        cmocka_unit_test(an_unwritable_place_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
