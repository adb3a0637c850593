/* Joining every rank's step records into rows (metrics.h). */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ds_buf.h"
#include "ds_json_read.h"

#define SLOTS (2 * DS_METRICS_WINDOW)

typedef struct rank_rec {
    int have;
    double step_time, comm_wait, loss, lr, grad_norm, loss_scale;
    long long tokens;
    int skipped, total_steps;
    double cur[DS_METRICS_MAX_CATS], peak[DS_METRICS_MAX_CATS];
} rank_rec;

typedef struct slot {
    int used;
    long long step;
    unsigned long long seq; /* creation order: rows leave oldest first */
    int nhave;
    rank_rec *recs;         /* one per rank */
} slot;

struct ds_metrics {
    int world;
    slot slots[SLOTS];
    unsigned long long next_seq;
    long long *latest;   /* per rank: the highest step it reported, -1 before any */
    ds_buf *lines;       /* per rank: the line being assembled */
    char *discarding;    /* per rank: inside a line too long to keep */
    char *cats[DS_METRICS_MAX_CATS];
    int ncats;
    ds_metrics_model model;
    int model_rank;      /* who described it (-1: nobody yet) */
    long long skipped_total;
    long long last_step; /* of the last row out (-1 before) */
    int flushing;
    void (*sink)(void *ctx, const ds_metrics_row *row);
    void *sink_ctx;
    /* the row handed out last, and its per-rank arrays */
    double *r_step, *r_wait, *r_compute, *r_mem_cur, *r_mem_peak, *scratch;
};

static const double NaN = NAN;

ds_metrics *ds_metrics_new(int world) {
    if (world < 1) return NULL;
    ds_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    size_t w = (size_t)world;
    m->world = world;
    m->model_rank = -1;
    m->last_step = -1;
    m->latest = malloc(w * sizeof *m->latest);
    m->lines = calloc(w, sizeof *m->lines);
    m->discarding = calloc(w, 1);
    m->r_step = malloc(w * sizeof(double));
    m->r_wait = malloc(w * sizeof(double));
    m->r_compute = malloc(w * sizeof(double));
    m->r_mem_cur = malloc(w * DS_METRICS_MAX_CATS * sizeof(double));
    m->r_mem_peak = malloc(w * DS_METRICS_MAX_CATS * sizeof(double));
    m->scratch = malloc(w * sizeof(double));
    int ok = m->latest && m->lines && m->discarding && m->r_step && m->r_wait && m->r_compute && m->r_mem_cur &&
             m->r_mem_peak && m->scratch;
    for (int i = 0; ok && i < SLOTS; i++) ok = (m->slots[i].recs = calloc(w, sizeof(rank_rec))) != NULL;
    if (!ok) {
        ds_metrics_free(m);
        return NULL;
    }
    for (size_t r = 0; r < w; r++) m->latest[r] = -1;
    return m;
}

void ds_metrics_free(ds_metrics *m) {
    if (!m) return;
    for (int i = 0; i < SLOTS; i++) free(m->slots[i].recs);
    for (int r = 0; m->lines && r < m->world; r++) ds_buf_free(&m->lines[r]);
    for (int c = 0; c < m->ncats; c++) free(m->cats[c]);
    free(m->latest);
    free(m->lines);
    free(m->discarding);
    free(m->r_step);
    free(m->r_wait);
    free(m->r_compute);
    free(m->r_mem_cur);
    free(m->r_mem_peak);
    free(m->scratch);
    free(m);
}

int ds_metrics_cat(const ds_metrics *m, const char *name) {
    for (int c = 0; c < m->ncats; c++)
        if (!strcmp(m->cats[c], name)) return c;
    return -1;
}

/* Category names become JSON keys, TensorBoard tags and Prometheus labels: a word. */
static int valid_cat(const char *s) {
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    return n > 0 && n <= 32 && !s[n];
}

static int cat_index(ds_metrics *m, const char *name) {
    int c = ds_metrics_cat(m, name);
    if (c >= 0 || m->ncats == DS_METRICS_MAX_CATS) return c;
    if (!(m->cats[m->ncats] = strdup(name))) return -1;
    return m->ncats++;
}

const ds_metrics_model *ds_metrics_model_of(const ds_metrics *m) {
    return m->model_rank >= 0 ? &m->model : NULL;
}

/* ---- reading one record ---- */

/* A number or null (NaN). -1 when it is something else. */
static int get_num(const ds_jv *o, const char *key, double *out, ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    *out = NaN;
    if (!v || v->type == DS_JV_NULL) return 0;
    if (v->type != DS_JV_NUM) return ds_err_set(err, "%s: expected a number, found %s", key, ds_jv_type_name(v->type));
    *out = v->num;
    return 0;
}

/* An integer in [lo, hi], or dflt when absent. */
static int get_int(const ds_jv *o, const char *key, long long lo, long long hi, long long dflt, long long *out,
                   ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    *out = dflt;
    if (!v) return 0;
    if (v->type != DS_JV_NUM || !v->is_int || v->inum < lo || v->inum > hi)
        return ds_err_set(err, "%s: expected an integer in %lld..%lld", key, lo, hi);
    *out = v->inum;
    return 0;
}

static int get_str(const ds_jv *o, const char *key, char *dst, size_t cap, ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    if (!v || !ds_jv_is_cstr(v)) return ds_err_set(err, "%s: expected a string", key);
    snprintf(dst, cap, "%s", v->str);
    return 0;
}

static int read_mem(ds_metrics *m, const ds_jv *mem, rank_rec *rr, ds_err *err) {
    for (int c = 0; c < DS_METRICS_MAX_CATS; c++) rr->cur[c] = rr->peak[c] = NaN;
    if (!mem) return 0;
    if (mem->type != DS_JV_OBJ) return ds_err_set(err, "mem: expected an object");
    for (size_t i = 0; i < mem->len; i++) {
        const ds_jv *v = &mem->items[i];
        if (v->type != DS_JV_ARR || v->len != 2 || v->items[0].type != DS_JV_NUM || v->items[1].type != DS_JV_NUM)
            return ds_err_set(err, "mem.%.32s: expected [current, peak] in bytes", mem->keys[i]);
        if (!valid_cat(mem->keys[i])) return ds_err_set(err, "mem: '%.32s' is not a category name (a word)", mem->keys[i]);
        int c = cat_index(m, mem->keys[i]);
        if (c < 0) continue; /* more categories than a report holds */
        rr->cur[c] = v->items[0].num;
        rr->peak[c] = v->items[1].num;
    }
    return 0;
}

static slot *slot_for(ds_metrics *m, long long step) {
    slot *free_slot = NULL;
    for (int i = 0; i < SLOTS; i++) {
        if (m->slots[i].used && m->slots[i].step == step) return &m->slots[i];
        if (!m->slots[i].used && !free_slot) free_slot = &m->slots[i];
    }
    if (!free_slot) return NULL;
    free_slot->used = 1;
    free_slot->step = step;
    free_slot->seq = m->next_seq++;
    free_slot->nhave = 0;
    memset(free_slot->recs, 0, (size_t)m->world * sizeof(rank_rec));
    return free_slot;
}

static int read_step(ds_metrics *m, int rank, const ds_jv *o, ds_err *err) {
    long long step, tokens, total;
    rank_rec rr = {.have = 1};
    const ds_jv *sk = ds_jv_get(o, "skipped");
    if (get_int(o, "step", 0, (long long)1 << 53, -1, &step, err) || get_int(o, "tokens", 0, (long long)1 << 53, 0, &tokens, err) ||
        get_int(o, "total_steps", 1, 1 << 30, 0, &total, err) || get_num(o, "step_time", &rr.step_time, err) ||
        get_num(o, "comm_wait", &rr.comm_wait, err) || get_num(o, "loss", &rr.loss, err) ||
        get_num(o, "lr", &rr.lr, err) || get_num(o, "grad_norm", &rr.grad_norm, err) ||
        get_num(o, "loss_scale", &rr.loss_scale, err) || read_mem(m, ds_jv_get(o, "mem"), &rr, err))
        return -1;
    if (step < 0) return ds_err_set(err, "step: missing");
    if (sk && sk->type != DS_JV_BOOL) return ds_err_set(err, "skipped: expected true or false");
    rr.skipped = sk ? sk->boolean : -1;
    rr.tokens = tokens;
    rr.total_steps = (int)total;
    if (step <= m->last_step) return ds_err_set(err, "step %lld: came after its row was written (late, or numbered again)", step);
    slot *s = slot_for(m, step);
    if (!s) return ds_err_set(err, "step %lld: more than %d steps pending", step, SLOTS);
    if (s->recs[rank].have) return ds_err_set(err, "step %lld: reported twice", step);
    s->recs[rank] = rr;
    s->nhave++;
    if (step > m->latest[rank]) m->latest[rank] = step;
    return 0;
}

static int read_model(ds_metrics *m, int rank, const ds_jv *o, ds_err *err) {
    if (m->model_rank == 0 || (m->model_rank >= 0 && rank != 0)) return 0; /* rank 0's wins */
    ds_metrics_model md = {0};
    const ds_jv *st = ds_jv_get(o, "stages"), *pr = ds_jv_get(o, "predicted");
    if (!st || st->type != DS_JV_ARR) return ds_err_set(err, "stages: expected an array");
    for (size_t i = 0; i < st->len && i < DS_METRICS_MAX_STAGES; i++) {
        const ds_jv *s = &st->items[i];
        ds_metrics_stage *d = &md.stages[md.nstages++];
        long long zero;
        if (s->type != DS_JV_OBJ) return ds_err_set(err, "stages[%zu]: expected an object", i);
        if (get_str(s, "name", d->name, sizeof d->name, err) || get_str(s, "checkpoint", d->checkpoint, sizeof d->checkpoint, err) ||
            get_str(s, "precision", d->precision, sizeof d->precision, err) ||
            get_int(s, "params", 0, (long long)1 << 53, 0, &d->params, err) || get_int(s, "zero", 0, 3, 0, &zero, err))
            return ds_err_prefix(err, "stages[%zu]", i);
        d->zero = (int)zero;
    }
    for (int c = 0; c < DS_METRICS_MAX_CATS; c++) md.predicted[c] = NaN;
    if (pr) {
        if (pr->type != DS_JV_OBJ) return ds_err_set(err, "predicted: expected an object");
        for (size_t i = 0; i < pr->len; i++) {
            if (pr->items[i].type != DS_JV_NUM) return ds_err_set(err, "predicted.%.32s: expected bytes", pr->keys[i]);
            if (!valid_cat(pr->keys[i])) return ds_err_set(err, "predicted: '%.32s' is not a category name", pr->keys[i]);
            int c = cat_index(m, pr->keys[i]);
            if (c >= 0) md.predicted[c] = pr->items[i].num;
        }
        md.has_predicted = 1;
    }
    m->model = md;
    m->model_rank = rank;
    return 0;
}

int ds_metrics_record(ds_metrics *m, int rank, const char *line, size_t n, ds_err *err) {
    if (rank < 0 || rank >= m->world) return ds_err_set(err, "rank %d is not in the job", rank);
    ds_jv_limits lim = {.max_depth = 4, .max_values = 4096};
    ds_jv *o = ds_jv_parse_limits(line, n, &lim, err);
    if (!o) return ds_err_prefix(err, "rank %d: metrics record", rank);
    const ds_jv *kind = ds_jv_get(o, "kind");
    int rc;
    if (o->type != DS_JV_OBJ || !kind || !ds_jv_is_cstr(kind))
        rc = ds_err_set(err, "expected an object with a \"kind\"");
    else if (!strcmp(kind->str, "step"))
        rc = read_step(m, rank, o, err);
    else if (!strcmp(kind->str, "model"))
        rc = read_model(m, rank, o, err);
    else
        rc = ds_err_set(err, "unknown kind \"%.32s\"", kind->str);
    ds_jv_free(o);
    return rc ? ds_err_prefix(err, "rank %d: metrics record", rank) : 0;
}

void ds_metrics_set_sink(ds_metrics *m, void (*fn)(void *ctx, const ds_metrics_row *row), void *ctx) {
    m->sink = fn;
    m->sink_ctx = ctx;
}

static void drain(ds_metrics *m) {
    ds_metrics_row row;
    while (m->sink && ds_metrics_next(m, &row)) m->sink(m->sink_ctx, &row);
}

int ds_metrics_feed(ds_metrics *m, int rank, const void *p, size_t n, ds_err *err) {
    if (rank < 0 || rank >= m->world) return ds_err_set(err, "rank %d is not in the job", rank);
    ds_buf *b = &m->lines[rank];
    const char *s = p;
    int taken = 0, bad = 0;
    while (n > 0) {
        const char *nl = memchr(s, '\n', n);
        size_t take = nl ? (size_t)(nl - s) : n;
        if (!m->discarding[rank] && ds_buf_unread(b) + take > DS_METRICS_LINE_MAX) {
            ds_buf_clear(b);
            m->discarding[rank] = 1;
            if (!bad++) ds_err_set(err, "rank %d: metrics record over %d bytes", rank, DS_METRICS_LINE_MAX);
        }
        if (!m->discarding[rank] && ds_buf_put(b, s, take) != 0) {
            ds_buf_clear(b);
            m->discarding[rank] = 1;
            if (!bad++) ds_err_set(err, "out of memory");
        }
        s += take;
        n -= take;
        if (!nl) break;
        s++;
        n--;
        if (!m->discarding[rank] && ds_buf_unread(b) > 0) {
            ds_err e;
            if (ds_metrics_record(m, rank, ds_buf_str(b), ds_buf_unread(b), &e) == 0) taken++;
            else if (!bad++) *err = e;
            drain(m);
        }
        m->discarding[rank] = 0;
        ds_buf_clear(b);
    }
    return bad ? -1 : taken;
}

/* ---- rows ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The stat of v[0..world) over the ranks that reported (NaN values left out). */
static ds_stat stat_of(ds_metrics *m, const double *v, size_t stride) {
    ds_stat s = {NaN, NaN, NaN, NaN, -1};
    int n = 0;
    for (int r = 0; r < m->world; r++) {
        double x = v[(size_t)r * stride];
        if (isnan(x)) continue;
        m->scratch[n++] = x;
        if (s.max_rank < 0 || x > s.max) s.max = x, s.max_rank = r;
    }
    s.rank0 = v[0];
    if (!n) return s;
    qsort(m->scratch, (size_t)n, sizeof(double), cmp_double);
    s.min = m->scratch[0];
    s.median = n % 2 ? m->scratch[n / 2] : (m->scratch[n / 2 - 1] + m->scratch[n / 2]) / 2;
    return s;
}

static int slot_done(const ds_metrics *m, const slot *s) {
    for (int r = 0; r < m->world; r++)
        if (!s->recs[r].have && m->latest[r] <= s->step) return 0;
    return 1;
}

static void make_row(ds_metrics *m, slot *s, ds_metrics_row *row) {
    int w = m->world;
    const rank_rec *r0 = &s->recs[0];
    memset(row, 0, sizeof *row);
    row->step = s->step;
    row->nranks = s->nhave;
    row->loss = r0->have ? r0->loss : NaN;
    row->lr = r0->have ? r0->lr : NaN;
    row->grad_norm = r0->have ? r0->grad_norm : NaN;
    row->loss_scale = r0->have ? r0->loss_scale : NaN;
    row->skipped = r0->have ? r0->skipped : -1;
    if (row->skipped == 1) m->skipped_total++;
    row->skipped_total = m->skipped_total;
    double slowest = NaN;
    for (int r = 0; r < w; r++) {
        const rank_rec *rr = &s->recs[r];
        m->r_step[r] = rr->have ? rr->step_time : NaN;
        m->r_wait[r] = rr->have ? rr->comm_wait : NaN;
        m->r_compute[r] = rr->have ? rr->step_time - (isnan(rr->comm_wait) ? 0 : rr->comm_wait) : NaN;
        for (int c = 0; c < DS_METRICS_MAX_CATS; c++) {
            m->r_mem_cur[(size_t)r * DS_METRICS_MAX_CATS + c] = rr->have ? rr->cur[c] : NaN;
            m->r_mem_peak[(size_t)r * DS_METRICS_MAX_CATS + c] = rr->have ? rr->peak[c] : NaN;
        }
        if (!rr->have) continue;
        row->tokens += rr->tokens;
        if (rr->total_steps > row->total_steps) row->total_steps = rr->total_steps;
        if (!isnan(rr->step_time) && !(rr->step_time <= slowest)) slowest = rr->step_time;
    }
    row->tokens_per_s = slowest > 0 ? (double)row->tokens / slowest : NaN;
    row->step_time = stat_of(m, m->r_step, 1);
    row->comm_wait = stat_of(m, m->r_wait, 1);
    row->compute = stat_of(m, m->r_compute, 1);
    row->ncats = m->ncats;
    row->cats = (const char *const *)m->cats;
    for (int c = 0; c < m->ncats; c++) {
        row->mem_current[c] = stat_of(m, m->r_mem_cur + c, DS_METRICS_MAX_CATS);
        row->mem_peak[c] = stat_of(m, m->r_mem_peak + c, DS_METRICS_MAX_CATS);
    }
    row->rank_step_time = m->r_step;
    row->rank_compute = m->r_compute;
    row->rank_mem_cur = m->r_mem_cur;
    row->rank_mem_peak = m->r_mem_peak;
}

int ds_metrics_next(ds_metrics *m, ds_metrics_row *row) {
    slot *oldest = NULL;
    int used = 0;
    for (int i = 0; i < SLOTS; i++) {
        slot *s = &m->slots[i];
        if (!s->used) continue;
        used++;
        if (!oldest || s->seq < oldest->seq) oldest = s;
    }
    if (!oldest || !(m->flushing || used > DS_METRICS_WINDOW || slot_done(m, oldest))) return 0;
    make_row(m, oldest, row);
    if (oldest->step > m->last_step) m->last_step = oldest->step;
    oldest->used = 0;
    return 1;
}

void ds_metrics_flush(ds_metrics *m) { m->flushing = 1; }

/* ---- the row as JSON ---- */

static void kstat(ds_json *j, const char *key, const ds_stat *s) {
    ds_json_key(j, key);
    ds_json_obj(j);
    ds_json_knum(j, "rank0", s->rank0);
    ds_json_knum(j, "min", s->min);
    ds_json_knum(j, "median", s->median);
    ds_json_knum(j, "max", s->max);
    ds_json_kint(j, "max_rank", s->max_rank);
    ds_json_end(j);
}

void ds_metrics_row_json(const ds_metrics_row *row, double elapsed, ds_json *j) {
    ds_json_obj(j);
    ds_json_kint(j, "step", row->step);
    ds_json_knum(j, "elapsed", elapsed);
    ds_json_kint(j, "ranks", row->nranks);
    if (row->total_steps) ds_json_kint(j, "total_steps", row->total_steps);
    ds_json_knum(j, "loss", row->loss);
    ds_json_knum(j, "lr", row->lr);
    ds_json_knum(j, "grad_norm", row->grad_norm);
    ds_json_knum(j, "loss_scale", row->loss_scale);
    ds_json_key(j, "skipped");
    if (row->skipped < 0) ds_json_null(j);
    else ds_json_bool(j, row->skipped);
    ds_json_kint(j, "skipped_steps", row->skipped_total);
    ds_json_kint(j, "tokens", row->tokens);
    ds_json_knum(j, "tokens_per_s", row->tokens_per_s);
    kstat(j, "step_time", &row->step_time);
    kstat(j, "comm_wait", &row->comm_wait);
    kstat(j, "compute", &row->compute);
    ds_json_key(j, "mem");
    ds_json_obj(j);
    for (int c = 0; c < row->ncats; c++) {
        ds_json_key(j, row->cats[c]);
        ds_json_obj(j);
        kstat(j, "current", &row->mem_current[c]);
        kstat(j, "peak", &row->mem_peak[c]);
        ds_json_end(j);
    }
    ds_json_end(j);
    ds_json_end(j);
}
