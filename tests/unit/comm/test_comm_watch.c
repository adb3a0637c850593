/* The watch over ops the host no longer waits for (comm_watch.c, used by the NCCL
 * backend), with a fake backend and a given clock, so every decision is checked without
 * a GPU: nothing is asked while nothing is in flight; finished ops are freed; an op past
 * the timeout, an asynchronous error, a failed op or a peer's published failure stops the
 * communicator once, with the message the host waits used to give, telling the peers
 * unless the failure is a peer's; the store is asked only after an op has run 100 ms,
 * then every 250 ms; once stopped, new ops are refused with the same message. Last, the
 * thread: it stops the communicator while the test's main thread is blocked, as a
 * rank's is in a device wait. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "comm_watch.h"

enum { PENDING = 0, DONE = 1, FAILED = -1 };

typedef struct fake {
    int state[8];               /* per op id */
    int freed[8];
    int comm_error, peer_error; /* what the next questions answer */
    int comm_asked, peers_asked;
    int stops, told;
    char stop_why[sizeof(ds_err)];
    pthread_mutex_t mu;
    pthread_cond_t stopped;
} fake;

static int op_state(void *be, void *op, ds_err *err) {
    fake *f = be;
    int st = f->state[(intptr_t)op];
    if (st == FAILED) ds_err_set(err, "an illegal memory access was encountered");
    return st;
}
static void op_free(void *be, void *op) { ((fake *)be)->freed[(intptr_t)op]++; }
static int comm_error(void *be, ds_err *err) {
    fake *f = be;
    f->comm_asked++;
    if (f->comm_error) ds_err_set(err, "nccl op: remote process exited or there was a network error");
    return f->comm_error;
}
static int peer_failed(void *be, ds_err *err) {
    fake *f = be;
    f->peers_asked++;
    if (f->peer_error) ds_err_set(err, "nccl op: stopped: peer rank 1 (node7): killed");
    return f->peer_error;
}
static void stop(void *be, const ds_err *why, int tell_peers) {
    fake *f = be;
    pthread_mutex_lock(&f->mu);
    f->stops++;
    f->told = tell_peers;
    snprintf(f->stop_why, sizeof f->stop_why, "%s", why->msg);
    pthread_cond_signal(&f->stopped);
    pthread_mutex_unlock(&f->mu);
}

static const ds_comm_watch_ops OPS = {op_state, op_free, comm_error, peer_failed, stop, NULL};

static ds_comm_watch *watch_of(fake *f) {
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->stopped, NULL);
    ds_err err = {{0}};
    ds_comm_watch *w = ds_comm_watch_new(&OPS, f, "nccl op", 500, &err);
    assert_non_null(w);
    return w;
}

static void add(ds_comm_watch *w, intptr_t id, long long now) {
    ds_err err = {{0}};
    assert_int_equal(ds_comm_watch_add(w, (void *)id, now, &err), 0);
}

static void test_idle_asks_nothing_and_frees_finished(void **state) {
    (void)state;
    fake f;
    ds_comm_watch *w = watch_of(&f);
    ds_err why = {{0}};
    assert_int_equal(ds_comm_watch_check(w, 1000000, &why), 0);
    assert_int_equal(f.comm_asked + f.peers_asked, 0);
    add(w, 1, 0), add(w, 2, 0);
    f.state[1] = DONE;
    assert_int_equal(ds_comm_watch_check(w, 10, &why), 0);
    assert_int_equal(f.freed[1], 1);
    assert_int_equal(f.freed[2], 0);
    assert_int_equal(ds_comm_watch_pending(w), 1);
    assert_int_equal(f.comm_asked, 1); /* op 2 runs: NCCL is asked */
    f.state[2] = DONE;
    int asked = f.comm_asked;
    assert_int_equal(ds_comm_watch_check(w, 20000, &why), 0); /* done before any timeout */
    assert_int_equal(f.comm_asked, asked);
    assert_int_equal(ds_comm_watch_pending(w), 0);
    assert_int_equal(f.stops, 0);
    ds_comm_watch_free(w);
    assert_int_equal(f.freed[2], 1);
}

static void test_timeout_stops_once_and_refuses_later_ops(void **state) {
    (void)state;
    fake f;
    ds_comm_watch *w = watch_of(&f);
    ds_err why = {{0}};
    add(w, 1, 1000);
    assert_int_equal(ds_comm_watch_check(w, 1500, &why), 0); /* 500 ms: not past it */
    assert_int_equal(ds_comm_watch_check(w, 1501, &why), 1);
    assert_string_equal(why.msg, "nccl op: timed out after 500 ms");
    assert_int_equal(f.stops, 1);
    assert_int_equal(f.told, 1);
    assert_int_equal(ds_comm_watch_check(w, 2000, &why), 1);
    assert_int_equal(f.stops, 1);
    ds_err err = {{0}};
    assert_int_equal(ds_comm_watch_add(w, (void *)3, 2000, &err), -1);
    assert_string_equal(err.msg, "nccl op: timed out after 500 ms");
    assert_int_equal(f.freed[3], 1);
    ds_comm_watch_free(w);
    assert_int_equal(f.freed[1], 1);
}

static void test_peer_failure_asked_late_and_seldom(void **state) {
    (void)state;
    fake f;
    ds_comm_watch *w = watch_of(&f);
    ds_err why = {{0}};
    add(w, 1, 0);
    assert_int_equal(ds_comm_watch_check(w, 99, &why), 0);
    assert_int_equal(f.peers_asked, 0); /* a quick op costs the store nothing */
    assert_int_equal(ds_comm_watch_check(w, 100, &why), 0);
    assert_int_equal(f.peers_asked, 1);
    assert_int_equal(ds_comm_watch_check(w, 349, &why), 0);
    assert_int_equal(f.peers_asked, 1);
    f.peer_error = 1;
    assert_int_equal(ds_comm_watch_check(w, 350, &why), 1);
    assert_int_equal(f.peers_asked, 2);
    assert_string_equal(why.msg, "nccl op: stopped: peer rank 1 (node7): killed");
    assert_int_equal(f.stops, 1);
    assert_int_equal(f.told, 0); /* the peer's failure is already published */
    ds_comm_watch_free(w);
}

static void test_async_error_and_failed_op(void **state) {
    (void)state;
    fake f;
    ds_comm_watch *w = watch_of(&f);
    ds_err why = {{0}};
    add(w, 1, 0);
    f.comm_error = 1;
    assert_int_equal(ds_comm_watch_check(w, 1, &why), 1);
    assert_string_equal(why.msg, "nccl op: remote process exited or there was a network error");
    assert_int_equal(f.told, 1);
    ds_comm_watch_free(w);

    w = watch_of(&f);
    add(w, 1, 0), add(w, 2, 0);
    f.state[2] = FAILED;
    assert_int_equal(ds_comm_watch_check(w, 1, &why), 1);
    assert_string_equal(why.msg, "nccl op: an illegal memory access was encountered");
    assert_int_equal(f.stops, 1);
    assert_int_equal(f.told, 1);
    assert_int_equal(f.freed[2], 1);
    ds_comm_watch_free(w);
    assert_int_equal(f.freed[1], 1);
}

/* The thread stops the communicator on its own while this thread blocks, as a rank's
 * main thread is blocked in the device's wait for the loss. */
static void test_thread_stops_while_the_host_blocks(void **state) {
    (void)state;
    fake f;
    ds_comm_watch *w = watch_of(&f);
    ds_err err = {{0}};
    assert_int_equal(ds_comm_watch_start(w, 1, &err), 0);
    add(w, 1, 0); /* added "at 0": the thread's clock is far past the timeout */
    pthread_mutex_lock(&f.mu);
    while (!f.stops) pthread_cond_wait(&f.stopped, &f.mu);
    pthread_mutex_unlock(&f.mu);
    ds_err why = {{0}};
    assert_int_equal(ds_comm_watch_stopped(w, &why), 1);
    assert_string_equal(why.msg, "nccl op: timed out after 500 ms");
    assert_string_equal(f.stop_why, why.msg);
    ds_comm_watch_free(w);
    assert_int_equal(f.stops, 1);
    assert_int_equal(f.freed[1], 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_asks_nothing_and_frees_finished),
        cmocka_unit_test(test_timeout_stops_once_and_refuses_later_ops),
        cmocka_unit_test(test_peer_failure_asked_late_and_seldom),
        cmocka_unit_test(test_async_error_and_failed_op),
        cmocka_unit_test(test_thread_stops_while_the_host_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
