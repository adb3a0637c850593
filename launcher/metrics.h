/* Per-step metrics from every rank, joined into one row per step. Each rank's ds.monitor
 * (lua/ds/monitor.lua) writes one JSON object per line to its metrics pipe; the agent
 * forwards the bytes as METRICS frames (agent_proto.h), and they arrive here as chunks
 * per rank, like output. A "step" record is one optimizer step of one rank; a "model"
 * record describes the model's stages (for the report).
 *
 * A step becomes a row once every rank has reported it, or has reported a later step
 * (it skipped this one); rows come out in step order. A step some rank never reports
 * (a rank that died, a script that publishes on rank 0 only) waits until
 * DS_METRICS_WINDOW steps are pending, and at the end (ds_metrics_flush). A row holds
 * rank 0's training values (loss, lr, ...), the ranks' tokens summed, and for times and
 * memory rank 0's value with the minimum, median and maximum across the ranks that
 * reported. */
#ifndef DS_METRICS_H
#define DS_METRICS_H

#include <stddef.h>

#include "ds_err.h"
#include "ds_json.h"

#define DS_METRICS_MAX_CATS 16 /* memory categories (ds.memory()'s, with total) */
#define DS_METRICS_WINDOW 8    /* steps pending at most */
#define DS_METRICS_LINE_MAX 65536
#define DS_METRICS_MAX_STAGES 256

/* A value across ranks: rank 0's, the minimum, median (mean of the middle two for an
 * even count) and maximum, and which rank had the maximum. NaN where nobody said. */
typedef struct ds_stat {
    double rank0, min, median, max;
    int max_rank;
} ds_stat;

typedef struct ds_metrics_row {
    long long step;
    int nranks;              /* ranks that reported this step */
    int total_steps;         /* the script's planned total (0: not said) */
    double loss, lr, grad_norm, loss_scale; /* rank 0's; NaN when not said */
    int skipped;             /* rank 0's: 1 skipped (fp16 overflow), 0 not, -1 not said */
    long long skipped_total; /* steps skipped so far, this one included */
    long long tokens;        /* over every rank */
    double tokens_per_s;     /* tokens / the slowest rank's step time */
    ds_stat step_time;       /* wall seconds since the rank's previous step */
    ds_stat comm_wait;       /* seconds blocked in collectives during the step */
    ds_stat compute;         /* step_time - comm_wait: the straggler shows here */
    int ncats;
    const char *const *cats; /* category names (ds_metrics owns them) */
    ds_stat mem_current[DS_METRICS_MAX_CATS], mem_peak[DS_METRICS_MAX_CATS];
    /* Per rank (world entries, NaN for a rank that did not report); valid until the next
     * call into the ds_metrics. */
    const double *rank_step_time, *rank_compute;
    const double *rank_mem_cur, *rank_mem_peak; /* rank r, category c at [r * DS_METRICS_MAX_CATS + c] */
} ds_metrics_row;

typedef struct ds_metrics_stage {
    char name[64], checkpoint[32], precision[16];
    long long params;
    int zero;
} ds_metrics_stage;

/* The model as rank 0 (or the first rank to say) described it. */
typedef struct ds_metrics_model {
    int nstages;
    ds_metrics_stage stages[DS_METRICS_MAX_STAGES];
    double predicted[DS_METRICS_MAX_CATS]; /* planner's bytes per category; NaN: none */
    int has_predicted;
} ds_metrics_model;

typedef struct ds_metrics ds_metrics;

ds_metrics *ds_metrics_new(int world);
void ds_metrics_free(ds_metrics *m);

/* Hands every row to fn as soon as it is finished, from within ds_metrics_feed (so a
 * chunk holding many steps of one rank never waits on the window's room). Without a
 * sink, rows wait for ds_metrics_next. */
void ds_metrics_set_sink(ds_metrics *m, void (*fn)(void *ctx, const ds_metrics_row *row), void *ctx);
/* Bytes from rank's metrics pipe. Returns how many complete records were taken; -1 when
 * one was malformed (err says which and why; the others are still taken). */
int ds_metrics_feed(ds_metrics *m, int rank, const void *p, size_t n, ds_err *err);
/* One record (a line without its newline): 0, or -1 with err. */
int ds_metrics_record(ds_metrics *m, int rank, const char *line, size_t n, ds_err *err);

/* The next finished row, in step order: 1 and *row filled, or 0 when none is ready. */
int ds_metrics_next(ds_metrics *m, ds_metrics_row *row);
/* The job ended: every pending step is finished as it stands (ds_metrics_next gives them). */
void ds_metrics_flush(ds_metrics *m);

/* The model record, or NULL before one came. */
const ds_metrics_model *ds_metrics_model_of(const ds_metrics *m);
/* Category index of name, or -1. */
int ds_metrics_cat(const ds_metrics *m, const char *name);

/* A row as one JSON object (metrics.jsonl's line; docs/monitoring.md), elapsed being the
 * controller's seconds since the job started. */
void ds_metrics_row_json(const ds_metrics_row *row, double elapsed, ds_json *j);

#endif
