#include "events.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent_proto.h" /* ds_write_all */
#include "notify.h"

struct ds_events {
    int fd;
    char *job_id;
    struct timespec t0; /* CLOCK_MONOTONIC at open: elapsed_s */
    ds_json j;          /* the event being built */
    int building;
    const char *kind;
    struct ds_notify *notify;
    long long lost;     /* bytes a failed write dropped */
};

ds_events *ds_events_open(const char *path, const char *job_id, int mode, ds_err *err) {
    ds_events *ev = calloc(1, sizeof *ev);
    if (!ev || !(ev->job_id = strdup(job_id))) {
        free(ev);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    ev->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, (mode_t)mode);
    if (ev->fd < 0) {
        ds_err_errno(err, errno, "%s", path);
        free(ev->job_id);
        free(ev);
        return NULL;
    }
    fchmod(ev->fd, (mode_t)mode);
    clock_gettime(CLOCK_MONOTONIC, &ev->t0);
    return ev;
}

void ds_events_set_notify(ds_events *ev, struct ds_notify *n) {
    if (ev) ev->notify = n;
}

ds_json *ds_event_begin(ds_events *ev, const char *kind) {
    if (!ev) return NULL;
    struct timespec now, mono;
    clock_gettime(CLOCK_REALTIME, &now);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char stamp[48];
    size_t n = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof stamp - n, ".%03ldZ", now.tv_nsec / 1000000);
    double rel = (double)(mono.tv_sec - ev->t0.tv_sec) + (double)(mono.tv_nsec - ev->t0.tv_nsec) / 1e9;
    ds_json_init_buf(&ev->j, 0);
    ds_json_obj(&ev->j);
    ds_json_kstr(&ev->j, "time", stamp);
    ds_json_knum(&ev->j, "elapsed_s", (double)(long long)(rel * 1000) / 1000);
    ds_json_kstr(&ev->j, "job", ev->job_id);
    ds_json_kstr(&ev->j, "event", kind);
    ev->kind = kind;
    ev->building = 1;
    return &ev->j;
}

static void finish(ds_events *ev, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ds_json_kstr(&ev->j, "message", msg);
    ds_json_end(&ev->j);
    ev->building = 0;
    if (ev->j.bad) {
        ds_buf_free(&ev->j.text);
        return;
    }
    if (ev->notify && strcmp(ev->kind, "info") != 0) ds_notify_post(ev->notify, ds_buf_str(&ev->j.text));
    ds_buf_put(&ev->j.text, "\n", 1);
    /* One write per line (O_APPEND): a crash loses nothing written before it. */
    size_t len = ds_buf_unread(&ev->j.text);
    if (ev->fd >= 0 && ds_write_all(ev->fd, ds_buf_head(&ev->j.text), len) != 0) {
        if (!ev->lost)
            fprintf(stderr, "dslaunch: warning: launcher.log: %s; events are being lost\n", strerror(errno));
        ev->lost += (long long)len;
    }
    ds_buf_free(&ev->j.text);
}

void ds_event_end(ds_events *ev, const char *fmt, ...) {
    if (!ev || !ev->building) return;
    va_list ap;
    va_start(ap, fmt);
    finish(ev, fmt, ap);
    va_end(ap);
}

void ds_event(ds_events *ev, const char *fmt, ...) {
    if (!ev || ev->building) return;
    ds_event_begin(ev, "info");
    va_list ap;
    va_start(ap, fmt);
    finish(ev, fmt, ap);
    va_end(ap);
}

long long ds_events_lost_bytes(const ds_events *ev) { return ev ? ev->lost : 0; }

void ds_events_close(ds_events *ev) {
    if (!ev) return;
    if (ev->fd >= 0) close(ev->fd);
    free(ev->job_id);
    free(ev);
}
