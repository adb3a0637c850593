/* Joining ranks' step records into rows: order, completion (every rank reported, or
 * reported a later step), the window for ranks that never report, the statistics, bad
 * records refused without losing the good ones, and the row's JSON. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

static void feed(ds_metrics *m, int rank, const char *text) {
    ds_err err = {{0}};
    int n = ds_metrics_feed(m, rank, text, strlen(text), &err);
    if (n < 0) fail_msg("rank %d: %s", rank, err.msg);
}

/* One step record: step time t, comm wait w, memory params [cur, peak]. */
static void step(ds_metrics *m, int rank, int s, double t, double w, double loss, long long params_peak) {
    char line[512];
    snprintf(line, sizeof line,
             "{\"kind\":\"step\",\"step\":%d,\"total_steps\":10,\"step_time\":%g,\"comm_wait\":%g,\"loss\":%g,"
             "\"lr\":0.001,\"grad_norm\":2,\"loss_scale\":1024,\"skipped\":%s,\"tokens\":100,"
             "\"mem\":{\"params\":[%lld,%lld],\"total\":[10,20]}}\n",
             s, t, w, loss, s == 2 ? "true" : "false", params_peak / 2, params_peak);
    feed(m, rank, line);
}

static void rows_come_out_when_every_rank_reported(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(3);
    ds_metrics_row row;
    step(m, 0, 1, 0.5, 0.1, 4.0, 1000);
    step(m, 1, 1, 0.7, 0.3, 9.0, 3000);
    assert_int_equal(ds_metrics_next(m, &row), 0); /* rank 2 still to come */
    step(m, 2, 1, 0.6, 0.0, 9.0, 2000);
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 1);
    assert_int_equal(row.nranks, 3);
    assert_int_equal(row.total_steps, 10);
    assert_true(row.loss == 4.0); /* rank 0's */
    assert_int_equal(row.tokens, 300);
    assert_true(fabs(row.tokens_per_s - 300 / 0.7) < 1e-9);
    assert_true(row.step_time.rank0 == 0.5 && row.step_time.min == 0.5 && row.step_time.median == 0.6 &&
                row.step_time.max == 0.7);
    assert_int_equal(row.step_time.max_rank, 1);
    /* compute = step time - wait: 0.4, 0.4, 0.6: rank 2 is the straggler */
    assert_true(fabs(row.compute.max - 0.6) < 1e-12);
    assert_int_equal(row.compute.max_rank, 2);
    int params = ds_metrics_cat(m, "params");
    assert_true(params >= 0 && ds_metrics_cat(m, "total") >= 0 && ds_metrics_cat(m, "grads") < 0);
    assert_true(row.mem_peak[params].max == 3000 && row.mem_peak[params].median == 2000 && row.mem_peak[params].min == 1000);
    assert_true(row.mem_current[params].max == 1500);
    assert_true(row.rank_mem_peak[2 * DS_METRICS_MAX_CATS + params] == 2000);
    assert_true(row.rank_compute[2] == 0.6);
    assert_int_equal(row.skipped, 0);
    assert_int_equal(ds_metrics_next(m, &row), 0);
    ds_metrics_free(m);
}

static void the_median_of_an_even_count_is_the_mean_of_the_middle_two(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(4);
    ds_metrics_row row;
    double t[4] = {0.4, 0.1, 0.3, 0.2};
    for (int r = 0; r < 4; r++) step(m, r, 1, t[r], 0, 1, 8);
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_true(fabs(row.step_time.median - 0.25) < 1e-12);
    assert_true(row.step_time.rank0 == 0.4 && row.step_time.max_rank == 0);
    ds_metrics_free(m);
}

static void records_split_anywhere_still_join(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    const char *a = "{\"kind\":\"step\",\"step\":7,\"loss\":1.5,\"step_time\":2}\n{\"kind\":\"step\",\"step\":8}\n";
    for (const char *p = a; *p; p++) {
        ds_err err;
        assert_true(ds_metrics_feed(m, 0, p, 1, &err) >= 0);
        assert_true(ds_metrics_feed(m, 1, p, 1, &err) >= 0);
    }
    ds_metrics_row row;
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 7);
    assert_true(row.loss == 1.5 && row.step_time.max == 2);
    assert_true(isnan(row.grad_norm) && row.skipped == -1); /* not said */
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 8);
    ds_metrics_free(m);
}

static void a_later_step_finishes_an_earlier_one(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    ds_metrics_row row;
    for (int s = 1; s <= 3; s++) step(m, 0, s, 1, 0, s, 8);
    step(m, 1, 1, 1, 0, 1, 8);
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 1);
    assert_int_equal(ds_metrics_next(m, &row), 0);
    step(m, 1, 3, 1, 0, 3, 8); /* rank 1 never says step 2 */
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 2);
    assert_int_equal(row.nranks, 1);
    assert_int_equal(row.skipped, 1);
    assert_int_equal(row.skipped_total, 1);
    assert_true(isnan(row.rank_step_time[1]));
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.step, 3);
    assert_int_equal(row.nranks, 2);
    assert_int_equal(row.skipped_total, 1);
    ds_metrics_free(m);
}

static void a_silent_rank_delays_rows_by_the_window_only(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    ds_metrics_row row;
    int out = 0;
    for (int s = 1; s <= 30; s++) {
        step(m, 0, s, 1, 0, s, 8);
        while (ds_metrics_next(m, &row)) {
            assert_int_equal(row.step, ++out);
            assert_int_equal(row.nranks, 1);
        }
        assert_int_equal(out, s > DS_METRICS_WINDOW ? s - DS_METRICS_WINDOW : 0);
    }
    ds_metrics_flush(m);
    while (ds_metrics_next(m, &row)) assert_int_equal(row.step, ++out);
    assert_int_equal(out, 30);
    ds_metrics_free(m);
}

typedef struct seen {
    long long steps[200];
    int n;
} seen;

static void collect(void *ctx, const ds_metrics_row *row) {
    seen *s = ctx;
    s->steps[s->n++] = row->step;
}

static void a_sink_takes_rows_as_a_chunk_finishes_them(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    seen s = {.n = 0};
    ds_metrics_set_sink(m, collect, &s);
    char *chunk = malloc(100 * 40), *p = chunk;
    for (int k = 1; k <= 100; k++) p += sprintf(p, "{\"kind\":\"step\",\"step\":%d}\n", k);
    ds_err err = {{0}};
    /* 100 steps of rank 0 in one chunk, rank 1 silent: none refused for want of room */
    assert_int_equal(ds_metrics_feed(m, 0, chunk, strlen(chunk), &err), 100);
    assert_int_equal(s.n, 100 - DS_METRICS_WINDOW);
    ds_metrics_flush(m);
    ds_metrics_row row;
    while (ds_metrics_next(m, &row)) collect(&s, &row);
    assert_int_equal(s.n, 100);
    for (int k = 0; k < 100; k++) assert_int_equal(s.steps[k], k + 1);
    free(chunk);
    ds_metrics_free(m);
}

static void expect_bad(ds_metrics *m, int rank, const char *line, const char *why) {
    ds_err err = {{0}};
    assert_int_equal(ds_metrics_record(m, rank, line, strlen(line), &err), -1);
    if (!strstr(err.msg, why)) fail_msg("'%s': got '%s', expected '%s'", line, err.msg, why);
}

static void bad_records_are_refused_and_the_rest_taken(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    expect_bad(m, 0, "{\"kind\":\"step\"", "rank 0: metrics record");
    expect_bad(m, 0, "[1,2]", "\"kind\"");
    expect_bad(m, 0, "{\"kind\":\"lunch\"}", "unknown kind");
    expect_bad(m, 0, "{\"kind\":\"step\"}", "step: missing");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":-1}", "step: expected an integer");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1.5}", "step: expected an integer");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1,\"loss\":\"low\"}", "loss: expected a number");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1,\"skipped\":1}", "skipped: expected true or false");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1,\"mem\":{\"params\":[1]}}", "expected [current, peak]");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1,\"mem\":{\"a b\":[1,2]}}", "not a category name");
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1,\"mem\":[[[[[1]]]]]}", "rank 0: metrics record");
    expect_bad(m, 5, "{\"kind\":\"step\",\"step\":1}", "rank 5 is not in the job");
    expect_bad(m, 1, "{\"kind\":\"model\",\"stages\":[{\"name\":\"x\"}]}", "stages[0]");
    ds_err err = {{0}};
    assert_int_equal(ds_metrics_record(m, 0, "{\"kind\":\"step\",\"step\":1}", 24, &err), 0);
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1}", "reported twice");
    /* a chunk with a bad line between good ones: the good ones count */
    const char *chunk = "{\"kind\":\"step\",\"step\":1}\nnot json\n{\"kind\":\"step\",\"step\":2}\n";
    assert_int_equal(ds_metrics_feed(m, 1, chunk, strlen(chunk), &err), -1);
    assert_non_null(strstr(err.msg, "rank 1"));
    ds_metrics_row row;
    assert_int_equal(ds_metrics_next(m, &row), 1);
    assert_int_equal(row.nranks, 2);
    expect_bad(m, 0, "{\"kind\":\"step\",\"step\":1}", "came after its row was written");
    /* a line over the limit is dropped whole; the next line is read */
    size_t big = DS_METRICS_LINE_MAX + 10;
    char *huge = malloc(big + 40);
    memset(huge, ' ', big);
    strcpy(huge + big, "\n{\"kind\":\"step\",\"step\":3}\n");
    assert_int_equal(ds_metrics_feed(m, 0, huge, strlen(huge), &err), -1);
    assert_non_null(strstr(err.msg, "over"));
    free(huge);
    assert_int_equal(ds_metrics_feed(m, 0, "{\"kind\":\"step\",\"step\":4}\n", 25, &err), 1);
    ds_metrics_free(m);
}

static void rank_zeros_model_wins(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    assert_null(ds_metrics_model_of(m));
    feed(m, 1, "{\"kind\":\"model\",\"stages\":[{\"name\":\"r1\",\"params\":1,\"zero\":0,\"checkpoint\":\"none\","
               "\"precision\":\"fp32\"}]}\n");
    assert_string_equal(ds_metrics_model_of(m)->stages[0].name, "r1");
    feed(m, 0, "{\"kind\":\"model\",\"stages\":[{\"name\":\"embed\",\"params\":30800,\"zero\":3,\"checkpoint\":\"full\","
               "\"precision\":\"bf16\"},{\"name\":\"head\",\"params\":192,\"zero\":1,\"checkpoint\":\"2\","
               "\"precision\":\"fp16\"}],\"predicted\":{\"params\":1e6}}\n");
    feed(m, 1, "{\"kind\":\"model\",\"stages\":[]}\n");
    const ds_metrics_model *md = ds_metrics_model_of(m);
    assert_int_equal(md->nstages, 2);
    assert_string_equal(md->stages[0].name, "embed");
    assert_int_equal(md->stages[0].params, 30800);
    assert_int_equal(md->stages[0].zero, 3);
    assert_string_equal(md->stages[0].checkpoint, "full");
    assert_string_equal(md->stages[1].precision, "fp16");
    assert_true(md->has_predicted && md->predicted[ds_metrics_cat(m, "params")] == 1e6);
    ds_metrics_free(m);
}

static void a_row_as_json(void **state) {
    (void)state;
    ds_metrics *m = ds_metrics_new(2);
    step(m, 0, 2, 0.5, 0.25, 3, 64);
    step(m, 1, 2, 1, 0.5, 3, 128);
    ds_metrics_row row;
    assert_int_equal(ds_metrics_next(m, &row), 1);
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_metrics_row_json(&row, 12.5, &j);
    assert_false(j.bad);
    assert_string_equal(ds_buf_str(&j.text),
        "{\"step\":2,\"elapsed\":12.5,\"ranks\":2,\"total_steps\":10,\"loss\":3,\"lr\":0.001,\"grad_norm\":2,"
        "\"loss_scale\":1024,\"skipped\":true,\"skipped_steps\":1,\"tokens\":200,\"tokens_per_s\":200,"
        "\"step_time\":{\"rank0\":0.5,\"min\":0.5,\"median\":0.75,\"max\":1,\"max_rank\":1},"
        "\"comm_wait\":{\"rank0\":0.25,\"min\":0.25,\"median\":0.375,\"max\":0.5,\"max_rank\":1},"
        "\"compute\":{\"rank0\":0.25,\"min\":0.25,\"median\":0.375,\"max\":0.5,\"max_rank\":1},"
        "\"mem\":{\"params\":{\"current\":{\"rank0\":32,\"min\":32,\"median\":48,\"max\":64,\"max_rank\":1},"
        "\"peak\":{\"rank0\":64,\"min\":64,\"median\":96,\"max\":128,\"max_rank\":1}},"
        "\"total\":{\"current\":{\"rank0\":10,\"min\":10,\"median\":10,\"max\":10,\"max_rank\":0},"
        "\"peak\":{\"rank0\":20,\"min\":20,\"median\":20,\"max\":20,\"max_rank\":0}}}}");
    ds_buf_free(&j.text);
    ds_metrics_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rows_come_out_when_every_rank_reported),
        cmocka_unit_test(the_median_of_an_even_count_is_the_mean_of_the_middle_two),
        cmocka_unit_test(records_split_anywhere_still_join),
        cmocka_unit_test(a_later_step_finishes_an_earlier_one),
        cmocka_unit_test(a_silent_rank_delays_rows_by_the_window_only),
        cmocka_unit_test(a_sink_takes_rows_as_a_chunk_finishes_them),
        cmocka_unit_test(bad_records_are_refused_and_the_rest_taken),
        cmocka_unit_test(rank_zeros_model_wins),
        cmocka_unit_test(a_row_as_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
