/* The simulator's streams: each is a thread running a FIFO of work items, so work runs
 * in the order it was queued on its stream and in no particular order across streams,
 * unless an event orders them; the host waits only where the device interface says it
 * does. Counting the items queued and run is all an event needs: recording one on a
 * stream names the count queued so far, and the event is reached when that many have
 * run.
 *
 * DS_SIM_DELAY=max_us makes each stream sleep a random time (up to max_us, from a
 * generator seeded by DS_SIM_SEED and the stream's index) before every item, so that
 * work which is ordered only by chance (a missing event wait, a host read before a
 * sync) comes out wrong in tests rather than working by luck of timing. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

static _Thread_local sim_stream *tls_stream;

sim_stream *sim_stream_self(void) { return tls_stream; }

void sim_fail(sim_dev *g, const char *fmt, ...) {
    pthread_mutex_lock(&g->lock);
    if (!atomic_load(&g->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->error, sizeof g->error, fmt, ap);
        va_end(ap);
        atomic_store(&g->failed, 1);
    }
    pthread_mutex_unlock(&g->lock);
}

int sim_check_failed(sim_dev *g, ds_err *err) {
    if (!atomic_load(&g->failed)) return 0;
    pthread_mutex_lock(&g->lock);
    ds_err_set(err, "device sim: %s", g->error);
    pthread_mutex_unlock(&g->lock);
    return -1;
}

static uint64_t next_random(uint64_t *state) { /* xorshift64* */
    uint64_t x = *state;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static void random_delay(sim_stream *s) {
    unsigned max = s->dev->delay_us;
    if (!max) return;
    uint64_t us = next_random(&s->rng) % ((uint64_t)max + 1);
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {}
}

static sim_work *next_work(sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    sim_work *w = s->head;
    if (w) {
        s->head = w->next;
        if (!s->head) s->tail = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    return w;
}

static void *stream_main(void *arg) {
    sim_stream *s = arg;
    tls_stream = s;
    sim_work *w;
    while ((w = next_work(s))) {
        random_delay(s);
        if (w->always || !atomic_load(&s->dev->failed)) {
            ds_err err = {{0}};
            if (w->run(w, s, &err) != 0) sim_fail(s->dev, "%s", err.msg);
        }
        free(w);
        pthread_mutex_lock(&s->lock);
        s->done++;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

sim_stream *sim_stream_start(sim_dev *g, ds_err *err) {
    sim_stream *s = calloc(1, sizeof *s);
    if (!s) return ds_err_set(err, "device sim: out of host memory for a stream"), NULL;
    s->dev = g;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    pthread_mutex_lock(&g->lock);
    s->index = g->nstreams++;
    pthread_mutex_unlock(&g->lock);
    s->rng = (g->seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(s->index + 1))) | 1;
    int rc = pthread_create(&s->thread, NULL, stream_main, s);
    if (rc != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return ds_err_errno(err, rc, "device sim: starting a stream's thread"), NULL;
    }
    char name[16];
    snprintf(name, sizeof name, "ds-sim-s%d", s->index);
    pthread_setname_np(s->thread, name);
    pthread_mutex_lock(&g->lock);
    s->next = g->streams;
    g->streams = s;
    pthread_mutex_unlock(&g->lock);
    return s;
}

void sim_stream_stop(sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    int join = !s->joined;
    s->stop = 1;
    s->joined = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    if (join) pthread_join(s->thread, NULL);
}

void sim_streams_free(sim_dev *g) {
    for (sim_stream *s = g->streams, *next; s; s = next) {
        next = s->next;
        sim_stream_stop(s);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
    }
    g->streams = g->compute = NULL;
}

uint64_t sim_enqueue(sim_stream *s, sim_work *w) {
    w->next = NULL;
    pthread_mutex_lock(&s->lock);
    if (s->stop) { /* a freed stream: the work is dropped, and nothing waits for it */
        uint64_t seq = ++s->queued;
        s->done++;
        pthread_mutex_unlock(&s->lock);
        free(w);
        sim_fail(s->dev, "work queued on stream %d after stream_free", s->index);
        return seq;
    }
    if (s->tail) s->tail->next = w;
    else s->head = w;
    s->tail = w;
    uint64_t seq = ++s->queued;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return seq;
}

typedef struct error_work {
    sim_work w;
    char msg[768];
} error_work;

static int run_error(sim_work *w, sim_stream *s, ds_err *err) {
    (void)s;
    return ds_err_set(err, "%s", ((error_work *)w)->msg);
}

void sim_enqueue_error(sim_stream *s, const char *msg) {
    error_work *e = calloc(1, sizeof *e);
    if (!e) { /* cannot queue it in order: report it now */
        sim_fail(s->dev, "%s", msg);
        return;
    }
    e->w.run = run_error;
    e->w.always = 1;
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    sim_enqueue(s, &e->w);
}

uint64_t sim_queued(sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    uint64_t seq = s->queued;
    pthread_mutex_unlock(&s->lock);
    return seq;
}

void sim_wait_seq(sim_stream *s, uint64_t seq) {
    pthread_mutex_lock(&s->lock);
    while (s->done < seq) pthread_cond_wait(&s->cond, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

void sim_wait_all(sim_dev *g) {
    /* streams are only ever added at the head, and stay until the device closes */
    pthread_mutex_lock(&g->lock);
    sim_stream *first = g->streams;
    pthread_mutex_unlock(&g->lock);
    for (sim_stream *s = first; s; s = s->next) sim_wait_seq(s, sim_queued(s));
}

void sim_event_record(sim_event *e, sim_stream *s) {
    pthread_mutex_lock(&s->lock);
    e->s = s;
    e->seq = s->queued;
    pthread_mutex_unlock(&s->lock);
}

int sim_event_reached(const sim_event *e) {
    if (!e->s) return 1;
    pthread_mutex_lock(&e->s->lock);
    int reached = e->s->done >= e->seq;
    pthread_mutex_unlock(&e->s->lock);
    return reached;
}

void sim_event_wait(const sim_event *e) {
    if (e->s) sim_wait_seq(e->s, e->seq);
}

/* The point to wait for is taken when the wait is queued (a later record of the same
 * event does not move it), as cudaStreamWaitEvent does. */
typedef struct wait_work {
    sim_work w;
    sim_event at;
} wait_work;

static int run_wait(sim_work *w, sim_stream *s, ds_err *err) {
    (void)s, (void)err;
    sim_event_wait(&((wait_work *)w)->at);
    return 0;
}

/* tests/unit/sim builds the simulator once more with DS_SIM_TEST_NO_WAIT, a stream_wait
 * that orders nothing, to show that its ordering tests fail without the wait. */
#ifdef DS_SIM_TEST_NO_WAIT
#define WAIT_IS_NO_OP 1
#else
#define WAIT_IS_NO_OP 0
#endif

void sim_stream_wait_event(sim_stream *s, const sim_event *e) {
    if (!e->s || e->s == s || WAIT_IS_NO_OP) return; /* nothing to wait for, or in order */
    wait_work *ww = calloc(1, sizeof *ww);
    if (!ww) { /* cannot queue the wait: keep the order by waiting on the host */
        sim_event_wait(e);
        return;
    }
    ww->w.run = run_wait;
    ww->w.always = 1;
    ww->at = *e;
    sim_enqueue(s, &ww->w);
}
