/* Checks what a run's monitor wrote, for the integration tests:
 *   monitor_check jsonl DIR STEPS RANKS [skips]  metrics.jsonl: one row per step 1..STEPS in
 *       order, every rank in each, every statistic ordered (min <= median <= max, rank 0's
 *       within, the max's rank a rank), the memory categories there; "skips": some steps
 *       were skipped (fp16)
 *   monitor_check tfevents DIR  the TensorBoard file, read by the tests' own reader
 *       (every checksum checked), against metrics.jsonl: one event per row and every
 *       number of the row as a scalar tagged with its path (step, elapsed, ranks,
 *       total_steps and max_rank left out), equal as float
 * Prints what it checked; exits 1 with the first difference. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_json_read.h"
#include "ds_textfile.h"
#include "tfrecord_read.h"

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    exit(1);
}

typedef struct rows {
    ds_jv **v;
    int n;
} rows;

static rows read_rows(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    ds_err err = {{0}};
    char *text = ds_textfile_read(path, "metrics", 1u << 30, &err);
    if (!text) die("%s", err.msg);
    rows r = {0};
    for (char *line = text, *nl; *line; line = nl + 1) {
        if (!(nl = strchr(line, '\n'))) die("%s: the last line has no newline", path);
        r.v = realloc(r.v, (size_t)(r.n + 1) * sizeof *r.v);
        if (!(r.v[r.n] = ds_jv_parse(line, (size_t)(nl - line), &err))) die("%s line %d: %s", path, r.n + 1, err.msg);
        r.n++;
    }
    free(text);
    return r;
}

static double num(const ds_jv *o, const char *key, int line) {
    const ds_jv *v = ds_jv_get(o, key);
    if (!v || v->type != DS_JV_NUM) die("line %d: %s is not a number", line, key);
    return v->num;
}

static void check_stat(const ds_jv *s, const char *what, int line, int ranks) {
    if (!s || s->type != DS_JV_OBJ) die("line %d: %s missing", line, what);
    double r0 = num(s, "rank0", line), lo = num(s, "min", line), med = num(s, "median", line), hi = num(s, "max", line);
    double mr = num(s, "max_rank", line);
    if (!(lo <= med && med <= hi && lo <= r0 && r0 <= hi)) die("line %d: %s out of order: %g %g %g %g", line, what, r0, lo, med, hi);
    if (mr < 0 || mr >= ranks) die("line %d: %s max_rank %g", line, what, mr);
}

static int check_jsonl(const char *dir, int steps, int ranks, int skips) {
    rows r = read_rows(dir);
    if (r.n != steps) die("%d rows, expected %d", r.n, steps);
    static const char *const cats[] = {"params", "grads", "optimizer", "activations", "total"};
    double skipped = 0;
    for (int i = 0; i < r.n; i++) {
        const ds_jv *o = r.v[i];
        int line = i + 1;
        if (num(o, "step", line) != line) die("line %d: step %g", line, num(o, "step", line));
        if (num(o, "ranks", line) != ranks) die("line %d: %g ranks reported", line, num(o, "ranks", line));
        if (num(o, "total_steps", line) != steps) die("line %d: total_steps", line);
        if (!isfinite(num(o, "loss", line)) || !(num(o, "tokens", line) > 0) || !(num(o, "tokens_per_s", line) > 0))
            die("line %d: loss, tokens or tokens_per_s", line);
        if (num(o, "skipped_steps", line) < skipped) die("line %d: skipped_steps went down", line);
        skipped = num(o, "skipped_steps", line);
        check_stat(ds_jv_get(o, "step_time"), "step_time", line, ranks);
        check_stat(ds_jv_get(o, "comm_wait"), "comm_wait", line, ranks);
        check_stat(ds_jv_get(o, "compute"), "compute", line, ranks);
        const ds_jv *mem = ds_jv_get(o, "mem");
        for (size_t c = 0; c < sizeof cats / sizeof cats[0]; c++) {
            const ds_jv *m = ds_jv_get(mem, cats[c]);
            if (!m) die("line %d: mem.%s missing", line, cats[c]);
            check_stat(ds_jv_get(m, "current"), cats[c], line, ranks);
            check_stat(ds_jv_get(m, "peak"), cats[c], line, ranks);
            if (num(ds_jv_get(m, "peak"), "max", line) < num(ds_jv_get(m, "current"), "max", line))
                die("line %d: mem.%s: peak below current", line, cats[c]);
        }
    }
    if (skips && !(skipped > 0)) die("no step was skipped");
    printf("metrics.jsonl: %d rows of %d ranks, every statistic in order, %g steps skipped\n", r.n, ranks, skipped);
    for (int i = 0; i < r.n; i++) ds_jv_free(r.v[i]);
    free(r.v);
    return 0;
}

static int not_a_curve(const char *key) {
    static const char *const skip[] = {"step", "elapsed", "ranks", "total_steps", "max_rank", NULL};
    for (int i = 0; skip[i]; i++)
        if (!strcmp(key, skip[i])) return 1;
    return 0;
}

static int count_numbers(const ds_jv *v) {
    int n = 0;
    for (size_t i = 0; i < v->len; i++) {
        if (not_a_curve(v->keys[i])) continue;
        if (v->items[i].type == DS_JV_OBJ) n += count_numbers(&v->items[i]);
        else n += v->items[i].type == DS_JV_NUM;
    }
    return n;
}

/* The value at "a/b/c" in o, or NULL. */
static const ds_jv *at_path(const ds_jv *o, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, "/", &save); k; k = strtok_r(NULL, "/", &save)) {
        if (not_a_curve(k)) return NULL;
        o = ds_jv_get(o, k);
    }
    return o;
}

static int check_tfevents(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) die("cannot open %s", dir);
    char path[4096] = "";
    int files = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (!strncmp(e->d_name, "events.out.tfevents.", 20)) snprintf(path, sizeof path, "%s/%s", dir, e->d_name), files++;
    closedir(d);
    if (files != 1) die("%d TensorBoard files in %s, expected 1", files, dir);
    tf_events ev;
    char why[256];
    if (tf_read(path, &ev, why, sizeof why) != 0) die("%s: %s", path, why);
    if (strcmp(ev.version, "brain.Event:2")) die("file_version '%s'", ev.version);
    rows r = read_rows(dir);
    if (ev.nevents != r.n + 1) die("%d events, expected %d rows + 1", ev.nevents, r.n);
    int k = 0;
    for (int i = 0; i < r.n; i++) {
        const ds_jv *o = r.v[i];
        long long step = (long long)num(o, "step", i + 1);
        int want = count_numbers(o), got = 0;
        for (; k < ev.n && ev.v[k].step == step; k++, got++) {
            const ds_jv *v = at_path(o, ev.v[k].tag);
            if (!v || v->type != DS_JV_NUM) die("step %lld: tag %s is not a number of the row", step, ev.v[k].tag);
            if ((float)v->num != ev.v[k].value)
                die("step %lld: %s = %.9g in TensorBoard, %.17g in metrics.jsonl", step, ev.v[k].tag, ev.v[k].value, v->num);
        }
        if (got != want) die("step %lld: %d scalars, the row has %d numbers", step, got, want);
    }
    if (k != ev.n) die("%d scalars left over after the last row", ev.n - k);
    printf("%s: %d events, %d scalars, every one equal to metrics.jsonl's value, every checksum right\n", path,
           ev.nevents, ev.n);
    tf_events_free(&ev);
    for (int i = 0; i < r.n; i++) ds_jv_free(r.v[i]);
    free(r.v);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 5 && !strcmp(argv[1], "jsonl"))
        return check_jsonl(argv[2], atoi(argv[3]), atoi(argv[4]), argc > 5 && !strcmp(argv[5], "skips"));
    if (argc == 3 && !strcmp(argv[1], "tfevents")) return check_tfevents(argv[2]);
    fprintf(stderr, "usage: monitor_check jsonl DIR STEPS RANKS [skips] | tfevents DIR\n");
    return 2;
}
