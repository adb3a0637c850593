#include "comm_watch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "ds_clock.h"

typedef struct watched {
    void *op;
    long long since;
    struct watched *next;
} watched;

struct ds_comm_watch {
    const ds_comm_watch_ops *ops;
    void *be;
    const char *what;
    int timeout_ms;
    pthread_mutex_t mu; /* everything below */
    pthread_cond_t wake;
    watched *head, *tail; /* in add order: the head is the oldest */
    int stopped;
    ds_err why;
    long long next_peers_look;
    pthread_t thread;
    int running, quit, poll_ms;
};

ds_comm_watch *ds_comm_watch_new(const ds_comm_watch_ops *ops, void *be, const char *what,
                                 int timeout_ms, ds_err *err) {
    ds_comm_watch *w = calloc(1, sizeof *w);
    if (!w) return ds_err_set(err, "%s: out of memory", what), NULL;
    w->ops = ops, w->be = be, w->what = what, w->timeout_ms = timeout_ms;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, NULL);
    return w;
}

int ds_comm_watch_add(ds_comm_watch *w, void *op, long long now_ms, ds_err *err) {
    watched *e = malloc(sizeof *e);
    pthread_mutex_lock(&w->mu);
    int stopped = w->stopped;
    if (stopped) *err = w->why;
    else if (!e) ds_err_set(err, "%s: out of memory", w->what);
    if (stopped || !e) {
        pthread_mutex_unlock(&w->mu);
        free(e);
        w->ops->op_free(w->be, op);
        return -1;
    }
    *e = (watched){.op = op, .since = now_ms};
    if (w->tail) w->tail->next = e;
    else w->head = e;
    w->tail = e;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Frees the finished ops (under mu); 1 with err when one failed. Each op is asked, not
 * only the oldest: ops on one stream end in order, but nothing here relies on it. */
static int retire(ds_comm_watch *w, ds_err *err) {
    int failed = 0;
    watched *kept = NULL; /* the last op still in flight: the tail when the walk ends */
    for (watched **p = &w->head; *p && !failed;) {
        watched *e = *p;
        int st = w->ops->op_state(w->be, e->op, err);
        if (st == 0) {
            kept = e;
            p = &e->next;
            continue;
        }
        failed = st < 0;
        *p = e->next;
        if (w->tail == e) w->tail = kept;
        w->ops->op_free(w->be, e->op);
        free(e);
    }
    return failed;
}

/* What stops the communicator now, if anything: 1 with why and *tell_peers. */
static int decide(ds_comm_watch *w, long long now, ds_err *why, int *tell_peers) {
    pthread_mutex_lock(&w->mu);
    ds_err err = {{0}};
    int failed = retire(w, &err);
    long long oldest = w->head ? w->head->since : 0;
    int pending = w->head != NULL, look = 0;
    if (pending && now - oldest >= DS_COMM_WATCH_PEERS_AFTER_MS && now >= w->next_peers_look) {
        look = 1;
        w->next_peers_look = now + DS_COMM_WATCH_PEERS_EVERY_MS;
    }
    pthread_mutex_unlock(&w->mu);
    *tell_peers = 1;
    if (failed) return ds_err_set(why, "%s: %s", w->what, err.msg), 1;
    if (!pending) return 0; /* nothing in flight: no question to NCCL or the store */
    if (w->ops->comm_error(w->be, why)) return 1;
    if (look && w->ops->peer_failed(w->be, why)) {
        *tell_peers = 0;
        return 1;
    }
    if (now - oldest > w->timeout_ms)
        return ds_err_set(why, "%s: timed out after %d ms", w->what, w->timeout_ms), 1;
    return 0;
}

int ds_comm_watch_check(ds_comm_watch *w, long long now_ms, ds_err *why) {
    if (ds_comm_watch_stopped(w, why)) return 1;
    int tell_peers;
    if (!decide(w, now_ms, why, &tell_peers)) return 0;
    /* recorded first: whoever learns of the stop from the backend finds why here */
    pthread_mutex_lock(&w->mu);
    w->stopped = 1;
    w->why = *why;
    pthread_mutex_unlock(&w->mu);
    w->ops->stop(w->be, why, tell_peers);
    return 1;
}

int ds_comm_watch_stopped(ds_comm_watch *w, ds_err *why) {
    pthread_mutex_lock(&w->mu);
    int stopped = w->stopped;
    if (stopped) *why = w->why;
    pthread_mutex_unlock(&w->mu);
    return stopped;
}

int ds_comm_watch_pending(ds_comm_watch *w) {
    pthread_mutex_lock(&w->mu);
    int n = 0;
    for (watched *e = w->head; e; e = e->next) n++;
    pthread_mutex_unlock(&w->mu);
    return n;
}

static void wait_ms(ds_comm_watch *w, int ms) { /* under mu */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&w->wake, &w->mu, &ts);
}

static void *watch_main(void *arg) {
    ds_comm_watch *w = arg;
    if (w->ops->on_thread) w->ops->on_thread(w->be);
    pthread_mutex_lock(&w->mu);
    while (!w->quit && !w->stopped) {
        if (!w->head) {
            pthread_cond_wait(&w->wake, &w->mu);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        ds_err why;
        ds_comm_watch_check(w, ds_now_ms(), &why);
        pthread_mutex_lock(&w->mu);
        if (!w->quit && !w->stopped && w->head) wait_ms(w, w->poll_ms);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int ds_comm_watch_start(ds_comm_watch *w, int poll_ms, ds_err *err) {
    w->poll_ms = poll_ms;
    int rc = pthread_create(&w->thread, NULL, watch_main, w);
    if (rc != 0) return ds_err_set(err, "%s: starting the watch thread: error %d", w->what, rc);
    w->running = 1;
    return 0;
}

void ds_comm_watch_free(ds_comm_watch *w) {
    if (!w) return;
    if (w->running) {
        pthread_mutex_lock(&w->mu);
        w->quit = 1;
        pthread_cond_signal(&w->wake);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL);
    }
    while (w->head) {
        watched *e = w->head;
        w->head = e->next;
        w->ops->op_free(w->be, e->op);
        free(e);
    }
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
