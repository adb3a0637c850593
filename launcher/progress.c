/* The progress line (progress.h). */
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "agent_proto.h"
#include "ds_clock.h"

#define RATE_WINDOW 32 /* steps the ETA's rate is measured over */
#define REDRAW_MS 100

struct ds_progress {
    int fd, tty, every;
    int drawn;              /* the line is on the terminal now */
    char line[512];
    long long last_draw_ms;
    long long steps[RATE_WINDOW];
    double times[RATE_WINDOW];
    int n, next;            /* ring of (step, elapsed) */
};

ds_progress *ds_progress_new(int fd, int tty, int every) {
    ds_progress *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->fd = fd;
    p->tty = tty;
    p->every = every > 0 ? every : 1;
    return p;
}

void ds_progress_duration(char *buf, size_t cap, double s) {
    long long t = (long long)(s + 0.5);
    if (t >= 3600) snprintf(buf, cap, "%lldh%02lldm", t / 3600, t / 60 % 60);
    else if (t >= 60) snprintf(buf, cap, "%lldm%02llds", t / 60, t % 60);
    else snprintf(buf, cap, "%llds", t);
}

static void human(char *buf, size_t cap, double v, const char *const units[], double base) {
    int u = 0;
    while (fabs(v) >= base && units[u + 1]) v /= base, u++;
    snprintf(buf, cap, u ? "%.1f%s" : "%.0f%s", v, units[u]);
}

void ds_progress_format(char *buf, size_t cap, const ds_metrics_row *row, double eta, int restarts) {
    static const char *const bytes[] = {" B", " KiB", " MiB", " GiB", " TiB", NULL};
    static const char *const counts[] = {" ", "k ", "M ", "G ", NULL};
    size_t n = 0;
#define ADD(...) (n += (size_t)snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__), n = n < cap ? n : cap)
    if (row->total_steps > 0)
        ADD("step %lld/%d (%d%%)", row->step, row->total_steps, (int)(100.0 * (double)row->step / row->total_steps));
    else
        ADD("step %lld", row->step);
    if (!isnan(row->loss)) ADD(" | loss %.4f", row->loss);
    if (!isnan(row->tokens_per_s)) {
        char t[32];
        human(t, sizeof t, row->tokens_per_s, counts, 1000);
        ADD(" | %stok/s", t);
    }
    if (eta >= 0) {
        char t[32];
        ds_progress_duration(t, sizeof t, eta);
        ADD(" | ETA %s", t);
    }
    for (int c = 0; c < row->ncats; c++) {
        if (strcmp(row->cats[c], "total") || isnan(row->mem_peak[c].max)) continue;
        char t[32];
        human(t, sizeof t, row->mem_peak[c].max, bytes, 1024);
        ADD(" | mem %s", t);
    }
    if (row->nranks > 1 && row->compute.max_rank >= 0 && row->compute.median > 0)
        ADD(" | slowest rank %d (+%.0f%%)", row->compute.max_rank, 100 * (row->compute.max / row->compute.median - 1));
    if (row->skipped_total > 0) ADD(" | skipped %lld", row->skipped_total);
    ADD(" | restarts %d", restarts);
#undef ADD
}

/* Seconds left at the rate of the last RATE_WINDOW rows; -1 when unknown. */
static double eta_of(ds_progress *p, const ds_metrics_row *row, double elapsed) {
    p->steps[p->next] = row->step;
    p->times[p->next] = elapsed;
    p->next = (p->next + 1) % RATE_WINDOW;
    if (p->n < RATE_WINDOW) p->n++;
    int oldest = (p->next - p->n + RATE_WINDOW) % RATE_WINDOW;
    double dsteps = (double)(row->step - p->steps[oldest]), dt = elapsed - p->times[oldest];
    if (row->total_steps <= 0) return -1;
    double left = (double)row->total_steps - (double)row->step;
    /* the last step leaves nothing, whatever the rate: rows read in one batch (a busy
     * launcher, a short job) share one elapsed time and give no rate */
    if (left <= 0) return 0;
    if (dsteps <= 0 || dt <= 0) return -1;
    return left * dt / dsteps;
}

static int columns(int fd) {
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10) return ws.ws_col;
    return 80;
}

static void draw(ds_progress *p) {
    char out[600];
    int width = columns(p->fd) - 1;
    int n = snprintf(out, sizeof out, "\r\033[K%.*s", width < (int)sizeof p->line ? width : (int)sizeof p->line, p->line);
    ds_write_all(p->fd, out, (size_t)n); /* a closed terminal only loses the view */
    p->drawn = 1;
    p->last_draw_ms = ds_now_ms();
}

void ds_progress_row(ds_progress *p, const ds_metrics_row *row, double elapsed, int restarts) {
    if (!p) return;
    ds_progress_format(p->line, sizeof p->line, row, eta_of(p, row, elapsed), restarts);
    if (p->tty) {
        int last = row->total_steps > 0 && row->step >= row->total_steps;
        if (last || ds_now_ms() - p->last_draw_ms >= REDRAW_MS) draw(p);
        return;
    }
    if (row->step % p->every && !(row->total_steps > 0 && row->step == row->total_steps)) return;
    char out[600];
    int n = snprintf(out, sizeof out, "dslaunch: %s\n", p->line);
    ds_write_all(p->fd, out, (size_t)(n < (int)sizeof out ? n : (int)sizeof out - 1));
}

void ds_progress_hide(ds_progress *p) {
    if (!p || !p->drawn) return;
    ds_write_all(p->fd, "\r\033[K", 4);
    p->drawn = 0;
}

void ds_progress_show(ds_progress *p) {
    if (p && p->tty && !p->drawn && p->line[0]) draw(p);
}

void ds_progress_end(ds_progress *p) {
    if (!p || !p->tty || !p->line[0]) return;
    draw(p);
    ds_write_all(p->fd, "\n", 1);
    p->drawn = 0;
    p->line[0] = 0;
}

void ds_progress_free(ds_progress *p) { free(p); }
