/* report.html: one self-contained page (its script, styles and charts inline; nothing is
 * fetched) with the run's curves and where its time and memory went: loss, learning
 * rate, tokens/s, step time across ranks and per rank, grad norm and loss scale,
 * memory per category per rank stacked beside each stage's ZeRO/precision/
 * checkpointing choice (and the planner's prediction when the script gave one), and
 * the job's events. The data is a JSON object inside the page; the page's script
 * (report_page.html, compiled in) draws SVG charts from it.
 *
 * Rewritten whole (a new file renamed over the old) while the run goes, reloading itself
 * in a browser every 10 s until the final version. Curves keep at most
 * DS_REPORT_MAX_POINTS points: on longer runs every k-th step (metrics.jsonl has them
 * all). */
#ifndef DS_REPORT_H
#define DS_REPORT_H

#include "ds_err.h"
#include "metrics.h"

#define DS_REPORT_MAX_POINTS 2000
#define DS_REPORT_MAX_SKIPPED 1000

typedef struct ds_report ds_report;

typedef struct ds_report_event {
    double t;         /* seconds since the job started */
    const char *text;
} ds_report_event;

/* What the page says about the job besides the rows. */
typedef struct ds_report_state {
    const char *status;        /* "running", "finished", "FAILED: why" */
    int final;                 /* the last version: no reloading */
    double elapsed;            /* seconds since the job started */
    int restarts;
    const ds_metrics_model *model; /* NULL: not described */
    const ds_report_event *events;
    int nevents;
} ds_report_state;

ds_report *ds_report_new(const char *path, const char *job_id, int world, const char *const *hosts);
void ds_report_free(ds_report *r);
/* Takes one row. */
void ds_report_row(ds_report *r, const ds_metrics_row *row, double elapsed);
/* Writes the page (path.tmp, then renamed over path). */
int ds_report_write(ds_report *r, const ds_report_state *st, ds_err *err);

#endif
