#include "events.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct ds_events {
    FILE *f;
    struct timespec t0; /* CLOCK_MONOTONIC at open: the "+s" column */
};

ds_events *ds_events_open(const char *path, ds_err *err) {
    ds_events *ev = calloc(1, sizeof *ev);
    if (!ev) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    ev->f = fopen(path, "w");
    if (!ev->f) {
        ds_err_errno(err, errno, "%s", path);
        free(ev);
        return NULL;
    }
    clock_gettime(CLOCK_MONOTONIC, &ev->t0);
    return ev;
}

void ds_event(ds_events *ev, const char *fmt, ...) {
    if (!ev) return;
    struct timespec now, mono;
    clock_gettime(CLOCK_REALTIME, &now);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    double rel = (double)(mono.tv_sec - ev->t0.tv_sec) + (double)(mono.tv_nsec - ev->t0.tv_nsec) / 1e9;
    fprintf(ev->f, "%s.%03ldZ +%.3fs ", stamp, now.tv_nsec / 1000000, rel);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(ev->f, fmt, ap);
    va_end(ap);
    fputc('\n', ev->f);
    fflush(ev->f);
}

void ds_events_close(ds_events *ev) {
    if (!ev) return;
    fclose(ev->f);
    free(ev);
}
