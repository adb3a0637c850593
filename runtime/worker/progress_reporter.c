#include "progress_reporter.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_progress.h"
#include "store_client.h"

struct ds_progress_reporter {
    ds_store_client *store;
    pthread_t thread;
    int stop_pipe[2]; /* written once to stop the thread */
    int rank, interval_ms;
};

static void *report_loop(void *arg) {
    ds_progress_reporter *r = arg;
    char key[48], val[160];
    snprintf(key, sizeof key, "progress/%d", r->rank);
    for (long long seq = 1;; seq++) {
        ds_progress_snapshot s;
        ds_progress_read(&s);
        int n = snprintf(val, sizeof val, "%lld %lld %lld %s", seq, s.step, s.op_ms, s.op);
        ds_err err;
        /* A store that is gone is the controller's news, not ours: stop reporting. */
        if (ds_store_set(r->store, key, val, (size_t)n, &err) != 0) break;
        struct pollfd p = {.fd = r->stop_pipe[0], .events = POLLIN};
        int rc;
        while ((rc = poll(&p, 1, r->interval_ms)) < 0 && errno == EINTR) {}
        if (rc != 0) break;
    }
    return NULL;
}

ds_progress_reporter *ds_progress_reporter_start(const char *rdzv, const char *token, const char *prefix,
                                                 int rank, int interval_ms, ds_err *err) {
    ds_progress_reporter *r = calloc(1, sizeof *r);
    if (!r) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    r->rank = rank;
    r->interval_ms = interval_ms > 0 ? interval_ms : 1000;
    r->stop_pipe[0] = r->stop_pipe[1] = -1;
    r->store = ds_store_connect_rank(rdzv, token, 30000, err);
    if (!r->store) {
        free(r);
        return NULL;
    }
    if (ds_store_set_prefix(r->store, prefix, err) != 0) goto fail;
    if (pipe2(r->stop_pipe, O_CLOEXEC) != 0) {
        ds_err_errno(err, errno, "pipe");
        goto fail;
    }
    /* The thread takes no signals: they belong to the rank's main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&r->thread, NULL, report_loop, r);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc == 0) return r;
    ds_err_errno(err, rc, "starting the progress reporter");
fail:
    if (r->stop_pipe[0] >= 0) close(r->stop_pipe[0]);
    if (r->stop_pipe[1] >= 0) close(r->stop_pipe[1]);
    ds_store_close(r->store);
    free(r);
    return NULL;
}

void ds_progress_reporter_stop(ds_progress_reporter *r) {
    if (!r) return;
    ssize_t ignored = write(r->stop_pipe[1], "x", 1);
    (void)ignored;
    pthread_join(r->thread, NULL);
    close(r->stop_pipe[0]);
    close(r->stop_pipe[1]);
    ds_store_close(r->store);
    free(r);
}
