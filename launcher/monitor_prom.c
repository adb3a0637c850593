/* Prometheus' text exposition format for the latest row: the same values as the
 * row's line in metrics.jsonl, named the Prometheus way (base units, _total for
 * counters), every sample labelled with the job. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_buf.h"
#include "metrics.h"
#include "monitor.h"

/* The shortest of %.15g / %.17g that reads back as the same double (as metrics.jsonl). */
static void put_value(ds_buf *b, double v) {
    if (isnan(v)) {
        ds_buf_puts(b, "NaN");
        return;
    }
    char s[40];
    snprintf(s, sizeof s, "%.15g", v);
    if (strtod(s, NULL) != v) snprintf(s, sizeof s, "%.17g", v);
    ds_buf_puts(b, s);
}

static void header(ds_buf *b, const char *name, const char *type, const char *help) {
    ds_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{job="ID"<labels>} value */
static void sample(ds_buf *b, const char *name, const char *job, const char *labels, double v) {
    ds_buf_printf(b, "%s{job=\"%s\"%s%s} ", name, job, labels[0] ? "," : "", labels);
    put_value(b, v);
    ds_buf_puts(b, "\n");
}

static void gauge(ds_buf *b, const char *name, const char *help, const char *job, double v) {
    header(b, name, "gauge", help);
    sample(b, name, job, "", v);
}

static void stats(ds_buf *b, const char *name, const char *job, const char *labels, const ds_stat *s) {
    const char *names[4] = {"rank0", "min", "median", "max"};
    double v[4] = {s->rank0, s->min, s->median, s->max};
    for (int i = 0; i < 4; i++) {
        char l[256];
        snprintf(l, sizeof l, "%s%sstat=\"%s\"", labels, labels[0] ? "," : "", names[i]);
        sample(b, name, job, l, v[i]);
    }
}

void ds_monitor_prom_text(ds_buf *b, const ds_metrics_row *row, const char *job, int restarts) {
    gauge(b, "ds_step", "The last step every rank reported.", job, (double)row->step);
    if (row->total_steps) gauge(b, "ds_total_steps", "The steps the script plans.", job, row->total_steps);
    gauge(b, "ds_ranks_reporting", "Ranks that reported the last step.", job, row->nranks);
    gauge(b, "ds_loss", "Training loss (rank 0).", job, row->loss);
    gauge(b, "ds_learning_rate", "Learning rate (rank 0).", job, row->lr);
    gauge(b, "ds_grad_norm", "Global gradient norm before clipping (rank 0).", job, row->grad_norm);
    gauge(b, "ds_loss_scale", "fp16 loss scale (rank 0).", job, row->loss_scale);
    header(b, "ds_skipped_steps_total", "counter", "Steps skipped for an fp16 overflow.");
    sample(b, "ds_skipped_steps_total", job, "", (double)row->skipped_total);
    gauge(b, "ds_tokens_per_second", "Tokens of every rank per second of the slowest rank's step.", job,
          row->tokens_per_s);
    header(b, "ds_step_time_seconds", "gauge", "Wall time of the last step across ranks.");
    stats(b, "ds_step_time_seconds", job, "", &row->step_time);
    header(b, "ds_comm_wait_seconds", "gauge", "Time blocked in collectives in the last step.");
    stats(b, "ds_comm_wait_seconds", job, "", &row->comm_wait);
    header(b, "ds_compute_seconds", "gauge", "Step time less collective waits in the last step.");
    stats(b, "ds_compute_seconds", job, "", &row->compute);
    header(b, "ds_memory_bytes", "gauge", "Allocated bytes per category, current and peak, across ranks.");
    for (int c = 0; c < row->ncats; c++)
        for (int k = 0; k < 2; k++) {
            char l[128];
            snprintf(l, sizeof l, "category=\"%s\",kind=\"%s\"", row->cats[c], k ? "peak" : "current");
            stats(b, "ds_memory_bytes", job, l, k ? &row->mem_peak[c] : &row->mem_current[c]);
        }
    header(b, "ds_restarts_total", "counter", "Restarts of the job so far.");
    sample(b, "ds_restarts_total", job, "", restarts);
}
