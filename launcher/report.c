/* report.html (report.h): the data the page draws, kept as rows arrive, and the page
 * written around it. */
#include "report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ds_buf.h"
#include "ds_json.h"
#include "ds_json_read.h"

/* The page (report_page.html, compiled in by the build): "@REFRESH@" is replaced by a
 * reload tag while the run goes, "@DATA@" by the JSON. */
extern const char ds_report_page[];

/* The curves, in the page's names. */
enum {
    S_STEP, S_ELAPSED, S_LOSS, S_LR, S_GRAD_NORM, S_LOSS_SCALE, S_TOKENS_PER_S,
    S_STEP_MIN, S_STEP_MEDIAN, S_STEP_MAX, S_COMPUTE_MIN, S_COMPUTE_MEDIAN, S_COMPUTE_MAX,
    S_WAIT_MEDIAN, S_WAIT_MAX, S_MEM_PEAK_MAX, NSERIES
};
static const char *const SERIES[NSERIES] = {
    "step", "elapsed", "loss", "lr", "grad_norm", "loss_scale", "tokens_per_s",
    "step_time_min", "step_time_median", "step_time_max", "compute_min", "compute_median", "compute_max",
    "comm_wait_median", "comm_wait_max", "mem_peak_max"};

typedef struct skipped_step {
    long long step;
    double loss_scale;
} skipped_step;

struct ds_report {
    char *path, *job_id;
    int world;
    char **hosts;
    double *pts[NSERIES];
    int npts, stride;
    long long seen;
    int total_steps;
    double *compute_sum, *step_sum; /* per rank, over rows after the first */
    long long *timed;
    double *mem_peak, *mem_cur;     /* per rank x category: the latest reported */
    char *cats[DS_METRICS_MAX_CATS];
    int ncats;
    skipped_step skipped[DS_REPORT_MAX_SKIPPED];
    int nskipped;
    long long skipped_total;
    ds_json last; /* the latest row as metrics.jsonl has it */
};

ds_report *ds_report_new(const char *path, const char *job_id, int world, const char *const *hosts) {
    ds_report *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t w = (size_t)world;
    r->world = world;
    r->stride = 1;
    r->path = strdup(path);
    r->job_id = strdup(job_id);
    r->hosts = calloc(w, sizeof *r->hosts);
    r->compute_sum = calloc(w, sizeof(double));
    r->step_sum = calloc(w, sizeof(double));
    r->timed = calloc(w, sizeof(long long));
    r->mem_peak = malloc(w * DS_METRICS_MAX_CATS * sizeof(double));
    r->mem_cur = malloc(w * DS_METRICS_MAX_CATS * sizeof(double));
    int ok = r->path && r->job_id && r->hosts && r->compute_sum && r->step_sum && r->timed && r->mem_peak && r->mem_cur;
    for (int s = 0; ok && s < NSERIES; s++) ok = (r->pts[s] = malloc(DS_REPORT_MAX_POINTS * sizeof(double))) != NULL;
    for (int i = 0; ok && i < world; i++) ok = (r->hosts[i] = strdup(hosts[i])) != NULL;
    if (!ok) {
        ds_report_free(r);
        return NULL;
    }
    for (size_t i = 0; i < w * DS_METRICS_MAX_CATS; i++) r->mem_peak[i] = r->mem_cur[i] = NAN;
    ds_json_init_buf(&r->last, 0);
    return r;
}

void ds_report_free(ds_report *r) {
    if (!r) return;
    for (int i = 0; r->hosts && i < r->world; i++) free(r->hosts[i]);
    for (int s = 0; s < NSERIES; s++) free(r->pts[s]);
    for (int c = 0; c < r->ncats; c++) free(r->cats[c]);
    free(r->hosts);
    free(r->path);
    free(r->job_id);
    free(r->compute_sum);
    free(r->step_sum);
    free(r->timed);
    free(r->mem_peak);
    free(r->mem_cur);
    ds_buf_free(&r->last.text);
    free(r);
}

/* The value of category name's max peak in row, or NaN. */
static double total_peak(const ds_metrics_row *row) {
    for (int c = 0; c < row->ncats; c++)
        if (!strcmp(row->cats[c], "total")) return row->mem_peak[c].max;
    return NAN;
}

static void add_point(ds_report *r, const ds_metrics_row *row, double elapsed) {
    if ((r->seen - 1) % r->stride) return;
    if (r->npts == DS_REPORT_MAX_POINTS) { /* keep every other point, take every 2k-th row */
        for (int s = 0; s < NSERIES; s++)
            for (int i = 0; i < r->npts / 2; i++) r->pts[s][i] = r->pts[s][2 * i];
        r->npts /= 2;
        r->stride *= 2;
        if ((r->seen - 1) % r->stride) return;
    }
    double v[NSERIES] = {
        (double)row->step, elapsed, row->loss, row->lr, row->grad_norm, row->loss_scale, row->tokens_per_s,
        row->step_time.min, row->step_time.median, row->step_time.max, row->compute.min, row->compute.median,
        row->compute.max, row->comm_wait.median, row->comm_wait.max, total_peak(row)};
    for (int s = 0; s < NSERIES; s++) r->pts[s][r->npts] = v[s];
    r->npts++;
}

static void take_ranks(ds_report *r, const ds_metrics_row *row) {
    for (int c = 0; c < row->ncats && c < DS_METRICS_MAX_CATS; c++)
        if (c >= r->ncats && (r->cats[c] = strdup(row->cats[c]))) r->ncats = c + 1;
    for (int k = 0; k < r->world; k++) {
        if (r->seen > 1 && !isnan(row->rank_compute[k])) {
            r->compute_sum[k] += row->rank_compute[k];
            r->step_sum[k] += row->rank_step_time[k];
            r->timed[k]++;
        }
        for (int c = 0; c < r->ncats; c++) {
            size_t i = (size_t)k * DS_METRICS_MAX_CATS + (size_t)c;
            if (!isnan(row->rank_mem_peak[i])) r->mem_peak[i] = row->rank_mem_peak[i];
            if (!isnan(row->rank_mem_cur[i])) r->mem_cur[i] = row->rank_mem_cur[i];
        }
    }
}

void ds_report_row(ds_report *r, const ds_metrics_row *row, double elapsed) {
    r->seen++;
    if (row->total_steps) r->total_steps = row->total_steps;
    add_point(r, row, elapsed);
    take_ranks(r, row);
    if (row->skipped == 1 && r->nskipped < DS_REPORT_MAX_SKIPPED)
        r->skipped[r->nskipped++] = (skipped_step){row->step, row->loss_scale};
    r->skipped_total = row->skipped_total;
    ds_buf_free(&r->last.text);
    ds_json_init_buf(&r->last, 0);
    ds_metrics_row_json(row, elapsed, &r->last);
}

/* ---- the page's data ---- */

static void num_array(ds_json *j, const char *key, const double *v, int n, size_t stride) {
    ds_json_key(j, key);
    ds_json_arr(j);
    for (int i = 0; i < n; i++) ds_json_num(j, v[(size_t)i * stride]);
    ds_json_end(j);
}

static void write_ranks(ds_report *r, ds_json *j) {
    double *mean = malloc((size_t)r->world * 2 * sizeof(double));
    if (!mean) {
        j->bad = 1;
        return;
    }
    for (int k = 0; k < r->world; k++) {
        mean[k] = r->timed[k] ? r->compute_sum[k] / (double)r->timed[k] : NAN;
        mean[r->world + k] = r->timed[k] ? r->step_sum[k] / (double)r->timed[k] : NAN;
    }
    ds_json_key(j, "ranks");
    ds_json_obj(j);
    ds_json_key(j, "hosts");
    ds_json_arr(j);
    for (int k = 0; k < r->world; k++) ds_json_str(j, r->hosts[k]);
    ds_json_end(j);
    num_array(j, "compute_mean", mean, r->world, 1);
    num_array(j, "step_time_mean", mean + r->world, r->world, 1);
    free(mean);
    ds_json_key(j, "mem_peak");
    ds_json_obj(j);
    for (int c = 0; c < r->ncats; c++) num_array(j, r->cats[c], r->mem_peak + c, r->world, DS_METRICS_MAX_CATS);
    ds_json_end(j);
    ds_json_key(j, "mem_current");
    ds_json_obj(j);
    for (int c = 0; c < r->ncats; c++) num_array(j, r->cats[c], r->mem_cur + c, r->world, DS_METRICS_MAX_CATS);
    ds_json_end(j);
    ds_json_end(j);
}

static void write_model(const ds_report *r, const ds_metrics_model *m, ds_json *j) {
    ds_json_key(j, "model");
    if (!m) {
        ds_json_null(j);
        return;
    }
    ds_json_obj(j);
    ds_json_key(j, "stages");
    ds_json_arr(j);
    for (int i = 0; i < m->nstages; i++) {
        const ds_metrics_stage *s = &m->stages[i];
        ds_json_obj(j);
        ds_json_kstr(j, "name", s->name);
        ds_json_kint(j, "params", s->params);
        ds_json_kint(j, "zero", s->zero);
        ds_json_kstr(j, "checkpoint", s->checkpoint);
        ds_json_kstr(j, "precision", s->precision);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_key(j, "predicted");
    if (!m->has_predicted) {
        ds_json_null(j);
    } else {
        /* The category table is the metrics' one; the report's copy has the same order. */
        ds_json_obj(j);
        for (int c = 0; c < r->ncats; c++)
            if (!isnan(m->predicted[c])) ds_json_knum(j, r->cats[c], m->predicted[c]);
        ds_json_end(j);
    }
    ds_json_end(j);
}

static void write_data(ds_report *r, const ds_report_state *st, ds_json *j) {
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S UTC", gmtime_r(&now, &tm));
    ds_json_obj(j);
    ds_json_kstr(j, "job", r->job_id);
    ds_json_kstr(j, "status", st->status);
    ds_json_kbool(j, "final", st->final);
    ds_json_kstr(j, "generated", stamp);
    ds_json_knum(j, "elapsed", st->elapsed);
    ds_json_kint(j, "world", r->world);
    ds_json_kint(j, "restarts", st->restarts);
    ds_json_kint(j, "total_steps", r->total_steps);
    ds_json_kint(j, "rows", r->seen);
    ds_json_kint(j, "stride", r->stride);
    ds_json_key(j, "categories");
    ds_json_arr(j);
    for (int c = 0; c < r->ncats; c++) ds_json_str(j, r->cats[c]);
    ds_json_end(j);
    ds_json_key(j, "series");
    ds_json_obj(j);
    for (int s = 0; s < NSERIES; s++) num_array(j, SERIES[s], r->pts[s], r->npts, 1);
    ds_json_end(j);
    ds_json_key(j, "last");
    ds_err perr;
    ds_jv *last = r->seen && !r->last.bad ? ds_jv_parse(ds_buf_str(&r->last.text), ds_buf_unread(&r->last.text), &perr) : NULL;
    if (last) ds_jv_emit(j, last);
    else ds_json_null(j);
    ds_jv_free(last);
    write_ranks(r, j);
    write_model(r, st->model, j);
    ds_json_kint(j, "skipped_total", r->skipped_total);
    ds_json_key(j, "skipped");
    ds_json_arr(j);
    for (int i = 0; i < r->nskipped; i++) {
        ds_json_arr(j);
        ds_json_int(j, r->skipped[i].step);
        ds_json_num(j, r->skipped[i].loss_scale);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_key(j, "events");
    ds_json_arr(j);
    for (int i = 0; i < st->nevents; i++) {
        ds_json_arr(j);
        ds_json_num(j, st->events[i].t);
        ds_json_str(j, st->events[i].text);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_end(j);
}

/* The JSON inside <script>: "</" would end the element early; "<\/" means the same. */
static int put_script_safe(FILE *f, const char *s) {
    for (const char *p; (p = strstr(s, "</")); s = p + 2)
        if (fwrite(s, 1, (size_t)(p - s), f) != (size_t)(p - s) || fputs("<\\/", f) < 0) return -1;
    return fputs(s, f) < 0 ? -1 : 0;
}

static int write_page(FILE *f, const char *data, int final) {
    const char *page = ds_report_page, *refresh = strstr(page, "@REFRESH@"), *at = strstr(page, "@DATA@");
    if (!refresh || !at || at < refresh) return -1;
    if (fwrite(page, 1, (size_t)(refresh - page), f) != (size_t)(refresh - page)) return -1;
    if (!final && fputs("<meta http-equiv=\"refresh\" content=\"10\">", f) < 0) return -1;
    const char *mid = refresh + strlen("@REFRESH@");
    if (fwrite(mid, 1, (size_t)(at - mid), f) != (size_t)(at - mid)) return -1;
    if (put_script_safe(f, data) != 0) return -1;
    return fputs(at + strlen("@DATA@"), f) < 0 ? -1 : 0;
}

int ds_report_write(ds_report *r, const ds_report_state *st, ds_err *err) {
    ds_json j;
    ds_json_init_buf(&j, 0);
    write_data(r, st, &j);
    if (j.bad) {
        ds_buf_free(&j.text);
        return ds_err_set(err, "%s: out of memory", r->path);
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", r->path);
    FILE *f = fopen(tmp, "w");
    int rc = f ? write_page(f, ds_buf_str(&j.text), st->final) : -1;
    int e = errno;
    if (f && fclose(f) != 0 && rc == 0) rc = -1, e = errno;
    ds_buf_free(&j.text);
    if (rc == 0 && rename(tmp, r->path) != 0) rc = -1, e = errno;
    if (rc != 0) {
        unlink(tmp);
        return ds_err_errno(err, e, "%s", r->path);
    }
    return 0;
}
