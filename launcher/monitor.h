/* The controller's side of ds.monitor (docs/monitoring.md): takes every rank's metrics
 * records (METRICS frames), joins them into one row per step (metrics.h) and hands each
 * row to the outputs the job asked for ([monitor] outputs): metrics.jsonl and TensorBoard
 * event files in the attempt's log directory, report.html there (rewritten every few
 * seconds and once more at the end), the progress line, and Prometheus' /metrics when
 * [monitor] metrics_port is set. A failing output is noted in launcher.log and dropped
 * (one that cannot even be created is also warned about on the terminal); the job goes
 * on. An endpoint that cannot listen is the one error that stops it. */
#ifndef DS_MONITOR_H
#define DS_MONITOR_H

#include <stddef.h>

#include "ds_err.h"
#include "events.h"

#define DS_MONITOR_REPORT_EVERY_MS 5000
#define DS_MONITOR_MAX_EVENTS 500 /* launcher.log lines the report shows (the last ones) */

typedef struct ds_monitor ds_monitor;

typedef struct ds_monitor_opts {
    const char *dir;          /* where the files go: the attempt's log directory */
    const char *job_id;
    int world;
    const char *const *hosts; /* each rank's host */
    int outputs;              /* DS_MONITOR_* (jobspec.h) */
    int steps_per_print;
    int metrics_port;         /* -1: no endpoint; 0: any free port */
    const char *metrics_addr; /* NULL: 127.0.0.1 */
    int progress_fd;          /* where the progress line goes */
    int tty;                  /* 1: the line is redrawn in place */
    int restarts;             /* so far */
    const char *events_path;  /* the job's event log, shown in the report */
    long long t0_ms;          /* ds_now_ms() when the job started */
    ds_events *ev;            /* where the monitor notes what it did */
} ds_monitor_opts;

/* Opens the outputs (the endpoint is announced in the event log and on stderr). */
ds_monitor *ds_monitor_open(const ds_monitor_opts *o, ds_err *err);
/* The port the Prometheus endpoint listens on, -1 without one. */
int ds_monitor_metrics_port(const ds_monitor *m);
/* Bytes from rank's metrics pipe. */
void ds_monitor_feed(ds_monitor *m, int rank, const void *p, size_t n);
/* Other output is about to go to the terminal (before = 1), or went (0). */
void ds_monitor_terminal(ds_monitor *m, int before);
/* The job is over: the last rows out, the final report. outcome: "finished", or
 * "FAILED: why". */
void ds_monitor_end(ds_monitor *m, const char *outcome);
/* Closes everything (NULL is fine). */
void ds_monitor_close(ds_monitor *m);

/* Prometheus' text exposition of a row (monitor_prom.c). */
struct ds_metrics_row;
struct ds_buf;
void ds_monitor_prom_text(struct ds_buf *out, const struct ds_metrics_row *row, const char *job_id, int restarts);

#endif
