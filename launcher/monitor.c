/* The monitor's hub (monitor.h): rows from the metrics join go to every output. */
#include "monitor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ds_buf.h"
#include "ds_clock.h"
#include "ds_json_read.h"
#include "jobspec.h"
#include "metrics.h"
#include "progress.h"
#include "prometheus.h"
#include "report.h"
#include "tfevents.h"

#define MAX_LOGGED_ERRORS 10
#define MAX_TAGS 512

struct ds_monitor {
    char *dir, *job_id, *events_path;
    int world, restarts;
    long long t0_ms;
    double t0_wall;   /* Unix time at t0_ms */
    ds_events *ev;
    ds_metrics *metrics;
    FILE *jsonl;
    ds_tfevents *tf;
    ds_report *report;
    ds_progress *progress;
    ds_prom *prom;
    long long report_due_ms;
    int errors;       /* bad records and failed outputs, noted in the event log */
    ds_json row;      /* the current row's JSON */
    ds_buf prom_text;
};

static void take_row(void *monitor, const ds_metrics_row *row);

static void note(ds_monitor *m, const char *what, const char *msg) {
    if (++m->errors <= MAX_LOGGED_ERRORS) ds_event(m->ev, "monitor: %s: %s", what, msg);
    if (m->errors == MAX_LOGGED_ERRORS) ds_event(m->ev, "monitor: further errors are not logged");
}

static char *join(const char *dir, const char *name) {
    char *p;
    return asprintf(&p, "%s/%s", dir, name) < 0 ? NULL : p;
}

/* A file output that cannot be created (a full disk) is warned about and left out: like
 * the ranks' logs, it does not stop the job. */
static void skip_output(ds_monitor *m, const char *what, const char *msg) {
    note(m, what, msg);
    fprintf(stderr, "dslaunch: warning: monitor: %s; it is not written\n", msg);
}

static int open_outputs(ds_monitor *m, const ds_monitor_opts *o, ds_err *err) {
    if (o->outputs & DS_MONITOR_JSONL) {
        char *path = join(o->dir, "metrics.jsonl");
        if (!path) return ds_err_set(err, "out of memory");
        if (!(m->jsonl = fopen(path, "w"))) {
            char msg[4200];
            snprintf(msg, sizeof msg, "%s: %s", path, strerror(errno));
            skip_output(m, "metrics.jsonl", msg);
        }
        free(path);
    }
    if (o->outputs & DS_MONITOR_TENSORBOARD) {
        ds_err tf_err = {{0}};
        if (!(m->tf = ds_tfevents_open(o->dir, &tf_err))) skip_output(m, "TensorBoard file", tf_err.msg);
    }
    if (o->outputs & DS_MONITOR_REPORT) {
        char *path = join(o->dir, "report.html");
        m->report = path ? ds_report_new(path, o->job_id, o->world, o->hosts) : NULL;
        free(path);
        if (!m->report) return ds_err_set(err, "out of memory");
    }
    if ((o->outputs & DS_MONITOR_PROGRESS) && !(m->progress = ds_progress_new(o->progress_fd, o->tty, o->steps_per_print)))
        return ds_err_set(err, "out of memory");
    if (o->metrics_port >= 0) {
        const char *addr = o->metrics_addr ? o->metrics_addr : "127.0.0.1";
        if (!(m->prom = ds_prom_start(addr, o->metrics_port, err))) return -1;
        char url[400];
        snprintf(url, sizeof url, strchr(addr, ':') ? "http://[%s]:%d/metrics" : "http://%s:%d/metrics", addr,
                 ds_prom_port(m->prom));
        ds_event(m->ev, "monitor: Prometheus metrics at %s", url);
        fprintf(stderr, "dslaunch: Prometheus metrics at %s\n", url);
    }
    return 0;
}

ds_monitor *ds_monitor_open(const ds_monitor_opts *o, ds_err *err) {
    ds_monitor *m = calloc(1, sizeof *m);
    if (!m) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    m->t0_ms = o->t0_ms;
    m->t0_wall = (double)now.tv_sec + now.tv_nsec / 1e9 - (double)(ds_now_ms() - o->t0_ms) / 1000;
    m->world = o->world;
    m->restarts = o->restarts;
    m->ev = o->ev;
    m->dir = strdup(o->dir);
    m->job_id = strdup(o->job_id);
    m->events_path = o->events_path ? strdup(o->events_path) : NULL;
    m->metrics = ds_metrics_new(o->world);
    if (m->metrics) ds_metrics_set_sink(m->metrics, take_row, m);
    m->report_due_ms = ds_now_ms() + DS_MONITOR_REPORT_EVERY_MS;
    if (!m->dir || !m->job_id || (o->events_path && !m->events_path) || !m->metrics) {
        ds_err_set(err, "out of memory");
        ds_monitor_close(m);
        return NULL;
    }
    if (open_outputs(m, o, err) != 0) {
        ds_err_prefix(err, "monitor");
        ds_monitor_close(m);
        return NULL;
    }
    return m;
}

/* ---- TensorBoard: every number of the row's JSON, tagged with its path ---- */

typedef struct tags {
    ds_tf_scalar v[MAX_TAGS];
    char names[MAX_TAGS][96];
    int n;
} tags;

/* Counts and ranks are not curves; the step is the event's own. */
static int not_a_curve(const char *key) {
    static const char *const skip[] = {"step", "elapsed", "ranks", "total_steps", "max_rank", NULL};
    for (int i = 0; skip[i]; i++)
        if (!strcmp(key, skip[i])) return 1;
    return 0;
}

static void collect(tags *t, const ds_jv *v, const char *path) {
    for (size_t i = 0; i < v->len && t->n < MAX_TAGS; i++) {
        const ds_jv *c = &v->items[i];
        if (not_a_curve(v->keys[i])) continue;
        char p[96];
        snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "/" : "", v->keys[i]);
        if (c->type == DS_JV_OBJ) {
            collect(t, c, p);
        } else if (c->type == DS_JV_NUM) {
            memcpy(t->names[t->n], p, sizeof p);
            t->v[t->n] = (ds_tf_scalar){t->names[t->n], (float)c->num};
            t->n++;
        }
    }
}

static void write_tensorboard(ds_monitor *m, long long step, double elapsed) {
    ds_err err = {{0}};
    ds_jv *v = ds_jv_parse(ds_buf_str(&m->row.text), ds_buf_unread(&m->row.text), &err);
    tags *t = v ? malloc(sizeof *t) : NULL;
    if (t) {
        t->n = 0;
        collect(t, v, "");
        if (ds_tfevents_write(m->tf, step, m->t0_wall + elapsed, t->v, t->n, &err) != 0) {
            note(m, "TensorBoard file", err.msg);
            ds_tfevents_close(m->tf);
            m->tf = NULL;
        }
    } else {
        note(m, "TensorBoard file", err.msg[0] ? err.msg : "out of memory");
    }
    free(t);
    ds_jv_free(v);
}

/* ---- rows ---- */

static void take_row(void *monitor, const ds_metrics_row *row) {
    ds_monitor *m = monitor;
    double elapsed = (double)(ds_now_ms() - m->t0_ms) / 1000;
    ds_buf_free(&m->row.text);
    ds_json_init_buf(&m->row, 0);
    ds_metrics_row_json(row, elapsed, &m->row);
    if (m->row.bad) {
        note(m, "row", "out of memory");
        return;
    }
    if (m->jsonl && (fprintf(m->jsonl, "%s\n", ds_buf_str(&m->row.text)) < 0 || fflush(m->jsonl) != 0)) {
        note(m, "metrics.jsonl", strerror(errno));
        fclose(m->jsonl);
        m->jsonl = NULL;
    }
    if (m->tf) write_tensorboard(m, row->step, elapsed);
    if (m->report) ds_report_row(m->report, row, elapsed);
    ds_progress_row(m->progress, row, elapsed, m->restarts);
    if (m->prom) {
        ds_buf_clear(&m->prom_text);
        ds_monitor_prom_text(&m->prom_text, row, m->job_id, m->restarts);
        ds_prom_set(m->prom, ds_buf_str(&m->prom_text), ds_buf_unread(&m->prom_text));
    }
}

int ds_monitor_metrics_port(const ds_monitor *m) { return m && m->prom ? ds_prom_port(m->prom) : -1; }

/* ---- the report ---- */

/* The last DS_MONITOR_MAX_EVENTS events of the event log (events.h: one JSON object per
 * line; its elapsed_s and message) into ev, their texts kept in text. */
static int read_events(const char *path, ds_buf *text, ds_report_event *ev) {
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return 0;
    char line[8192];
    long long lines = 0;
    while (fgets(line, sizeof line, f)) lines += strchr(line, '\n') != NULL;
    rewind(f);
    size_t off[DS_MONITOR_MAX_EVENTS];
    int n = 0;
    for (long long i = 0; n < DS_MONITOR_MAX_EVENTS && fgets(line, sizeof line, f);) {
        int whole = strchr(line, '\n') != NULL;
        if (i++ < lines - DS_MONITOR_MAX_EVENTS || !whole) continue;
        ds_err err = {{0}};
        ds_jv *o = ds_jv_parse(line, strlen(line), &err);
        const ds_jv *t = ds_jv_get(o, "elapsed_s"), *msg = ds_jv_get(o, "message");
        if (t && t->type == DS_JV_NUM && ds_jv_is_cstr(msg)) {
            ev[n].t = t->num;
            off[n++] = text->len;
            ds_buf_put(text, msg->str, msg->len + 1);
        }
        ds_jv_free(o);
    }
    fclose(f);
    if (text->oom) return 0;
    for (int i = 0; i < n; i++) ev[i].text = (const char *)text->data + off[i];
    return n;
}

static void write_report(ds_monitor *m, const char *status, int final) {
    ds_buf text = {0};
    ds_report_event *ev = calloc(DS_MONITOR_MAX_EVENTS, sizeof *ev);
    ds_report_state st = {
        .status = status,
        .final = final,
        .elapsed = (double)(ds_now_ms() - m->t0_ms) / 1000,
        .restarts = m->restarts,
        .model = ds_metrics_model_of(m->metrics),
        .events = ev,
        .nevents = ev ? read_events(m->events_path, &text, ev) : 0,
    };
    ds_err err = {{0}};
    if (ds_report_write(m->report, &st, &err) != 0) note(m, "report", err.msg);
    ds_buf_free(&text);
    free(ev);
    m->report_due_ms = ds_now_ms() + DS_MONITOR_REPORT_EVERY_MS;
}

/* ---- the interface ---- */

void ds_monitor_feed(ds_monitor *m, int rank, const void *p, size_t n) {
    if (!m) return;
    ds_err err = {{0}};
    if (ds_metrics_feed(m->metrics, rank, p, n, &err) < 0) note(m, "bad record", err.msg);
    if (m->report && ds_now_ms() >= m->report_due_ms) write_report(m, "running", 0);
}

void ds_monitor_terminal(ds_monitor *m, int before) {
    if (!m) return;
    if (before) ds_progress_hide(m->progress);
    else ds_progress_show(m->progress);
}

void ds_monitor_end(ds_monitor *m, const char *outcome) {
    if (!m) return;
    ds_metrics_flush(m->metrics);
    ds_metrics_row row;
    while (ds_metrics_next(m->metrics, &row)) take_row(m, &row);
    ds_progress_end(m->progress);
    if (m->report) write_report(m, outcome, 1);
    if (m->jsonl) fclose(m->jsonl);
    m->jsonl = NULL;
}

void ds_monitor_close(ds_monitor *m) {
    if (!m) return;
    ds_prom_stop(m->prom);
    if (m->jsonl) fclose(m->jsonl);
    ds_tfevents_close(m->tf);
    ds_report_free(m->report);
    ds_progress_free(m->progress);
    ds_metrics_free(m->metrics);
    ds_buf_free(&m->row.text);
    ds_buf_free(&m->prom_text);
    free(m->dir);
    free(m->job_id);
    free(m->events_path);
    free(m);
}
