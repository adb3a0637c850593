/* Helpers for the simulated device's tests: opening one with given settings, copies in
 * and out that fail the test on error, and a gate: a host function that holds a stream
 * until the test opens it, so that a test decides what has run and what has not instead
 * of guessing from timing. */
#ifndef SIM_TESTUTIL_H
#define SIM_TESTUTIL_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

/* The device open_sim opened and close_sim has not closed: a test that fails midway
 * leaves it open, and close_left_open (every test's teardown) closes it, so the next
 * test can open its own (one sim device per process). */
static ds_device *g_sim_open;

/* Opens sim with DS_SIM_MEMORY = memory and DS_SIM_DELAY = delay (NULL: unset). */
static inline ds_device *open_sim(const char *memory, const char *delay) {
    ds_err err = {{0}};
    if (memory) setenv("DS_SIM_MEMORY", memory, 1);
    else unsetenv("DS_SIM_MEMORY");
    if (delay) setenv("DS_SIM_DELAY", delay, 1);
    else unsetenv("DS_SIM_DELAY");
    ds_device *d = ds_device_sim_open(&err);
    if (!d) fprintf(stderr, "open sim: %s\n", err.msg);
    assert_non_null(d);
    return g_sim_open = d;
}

static inline void close_sim(ds_device *d) {
    d->ops->close(d);
    g_sim_open = NULL;
}

static inline int close_left_open(void **state) {
    (void)state;
    if (g_sim_open) close_sim(g_sim_open);
    return 0;
}

static inline void *dev_alloc(ds_device *d, size_t bytes) {
    ds_err err = {{0}};
    void *p = d->ops->alloc(d, bytes, &err);
    if (!p) fprintf(stderr, "alloc %zu: %s\n", bytes, err.msg);
    assert_non_null(p);
    return p;
}

static inline void dev_put(ds_device *d, void *dst, const void *src, size_t bytes) {
    ds_err err = {{0}};
    int rc = d->ops->from_host(d, dst, src, bytes, &err);
    if (rc) fprintf(stderr, "from_host: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

static inline void dev_get(ds_device *d, void *dst, const void *src, size_t bytes) {
    ds_err err = {{0}};
    int rc = d->ops->to_host(d, dst, src, bytes, &err);
    if (rc) fprintf(stderr, "to_host: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

static inline void dev_sync_ok(ds_device *d) {
    ds_err err = {{0}};
    int rc = d->ops->sync(d, &err);
    if (rc) fprintf(stderr, "sync: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

/* The device's next waiting call fails: its message, which must contain want. */
static inline void expect_sync_error(ds_device *d, const char *want) {
    ds_err err = {{0}};
    assert_int_equal(d->ops->sync(d, &err), -1);
    if (!strstr(err.msg, want)) fprintf(stderr, "error '%s' lacks '%s'\n", err.msg, want);
    assert_non_null(strstr(err.msg, want));
}

/* A latch: set once, waited on with a deadline. */
typedef struct latch {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int set;
} latch;

static inline void latch_init(latch *l) {
    pthread_mutex_init(&l->lock, NULL);
    pthread_cond_init(&l->cond, NULL);
    l->set = 0;
}

static inline void latch_set(latch *l) {
    pthread_mutex_lock(&l->lock);
    l->set = 1;
    pthread_cond_broadcast(&l->cond);
    pthread_mutex_unlock(&l->lock);
}

/* 1 when set within ms milliseconds (ms < 0: waits as long as it takes). */
static inline int latch_wait(latch *l, int ms) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&l->lock);
    while (!l->set)
        if (ms < 0) pthread_cond_wait(&l->cond, &l->lock);
        else if (pthread_cond_timedwait(&l->cond, &l->lock, &until) != 0) break;
    int set = l->set;
    pthread_mutex_unlock(&l->lock);
    return set;
}

static inline void latch_destroy(latch *l) {
    pthread_mutex_destroy(&l->lock);
    pthread_cond_destroy(&l->cond);
}

/* launch_host function: holds its stream until the latch (the gate) is set. */
static inline int gate_fn(void *arg, ds_err *err) {
    (void)err;
    latch_wait(arg, -1);
    return 0;
}

/* launch_host function: keeps its stream busy for 30 ms, then sets *arg (an int) when
 * given one: work that is still running when the host moves on. */
static inline int slow_fn(void *arg, ds_err *err) {
    (void)err;
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    if (arg) *(int *)arg = 1;
    return 0;
}

#endif
