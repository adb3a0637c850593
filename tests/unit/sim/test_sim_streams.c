/* The simulated device's streams and events: work on one stream runs in order, events
 * order two streams (checked both with a gate, which decides what may have run, and
 * under DS_SIM_DELAY's random delays), launch_host runs in stream order, sync waits for
 * every stream, and a failing host function is a sticky error.
 *
 * This file is built twice. The second build (test_sim_streams_nowait) runs against a
 * simulator whose stream_wait orders nothing (DS_SIM_TEST_NO_WAIT) and expects the two
 * ordering tests to see the misordering: proof that they fail when a wait is missing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "device.h"
#include "sim_testutil.h"

#ifdef DS_SIM_TEST_NO_WAIT
#define WAITS_ORDER 0
#else
#define WAITS_ORDER 1
#endif

typedef struct reader {
    ds_device *d;
    float *x; /* device */
    float seen;
    latch ran;
} reader;

static int read_fn(void *arg, ds_err *err) {
    (void)err;
    reader *r = arg;
    r->seen = ((float *)r->d->ops->alias(r->d, r->x))[0];
    latch_set(&r->ran);
    return 0;
}

/* The compute stream is held by a gate; the value x gets after the gate is what a second
 * stream, told to wait for an event recorded after that write, must read. While the gate
 * is closed the reader must not run at all (a working wait holds it; the wait below
 * times out as it should). Without the wait it runs at once and reads the old 0. */
static void test_event_orders_two_streams(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    ds_stream *s2 = d->ops->stream_new(d, &err);
    assert_non_null(s2);
    float one[4] = {1, 1, 1, 1};
    float *x = dev_alloc(d, sizeof one), *ones = dev_alloc(d, sizeof one);
    dev_put(d, ones, one, sizeof one);
    latch gate;
    latch_init(&gate);
    reader r = {.d = d, .x = x};
    latch_init(&r.ran);
    assert_int_equal(d->ops->launch_host(d, NULL, gate_fn, &gate, &err), 0);
    d->ops->copy(d, x, ones, sizeof one);
    ds_event *e = d->ops->event_new(d, &err);
    d->ops->event_record(d, e, NULL);
    d->ops->stream_wait(d, s2, e);
    assert_int_equal(d->ops->launch_host(d, s2, read_fn, &r, &err), 0);
    int ran_early = latch_wait(&r.ran, WAITS_ORDER ? 200 : 10000);
    latch_set(&gate);
    dev_sync_ok(d);
    if (WAITS_ORDER) {
        assert_false(ran_early);
        assert_true(r.seen == 1.0f);
    } else {
        assert_true(ran_early);
        assert_true(r.seen == 0.0f);
    }
    d->ops->event_free(d, e);
    d->ops->stream_free(d, s2);
    d->ops->free(d, x, sizeof one);
    d->ops->free(d, ones, sizeof one);
    dev_sync_ok(d);
    latch_destroy(&gate), latch_destroy(&r.ran);
    close_sim(d);
}

typedef struct adder {
    ds_device *d;
    float *x;
} adder;

static int add_one_fn(void *arg, ds_err *err) {
    (void)err;
    adder *a = arg;
    ((float *)a->d->ops->alias(a->d, a->x))[0] += 1.0f;
    return 0;
}

/* Ping-pong between the compute stream (x *= 2, a kernel) and a second stream (x += 1,
 * a host function), each waiting for the other's event, under random delays on both:
 * x = 1 ends at 2^(R+1) - 1 only if every round ran in order. Without the waits the two
 * streams run their items as their delays fall, and the value differs. */
static void test_ping_pong_under_delay(void **state) {
    (void)state;
    enum { R = 20 };
    int wrong = 0;
    for (int seed = 1; seed <= 3; seed++) {
        char s[16];
        snprintf(s, sizeof s, "%d", seed);
        setenv("DS_SIM_SEED", s, 1);
        ds_device *d = open_sim("64MiB", "300");
        ds_err err = {{0}};
        ds_stream *s2 = d->ops->stream_new(d, &err);
        ds_event *to_s2 = d->ops->event_new(d, &err), *to_compute = d->ops->event_new(d, &err);
        float x = 1.0f;
        float *dx = dev_alloc(d, sizeof x);
        dev_put(d, dx, &x, sizeof x);
        adder a = {d, dx};
        for (int i = 0; i < R; i++) {
            d->k->scale(dx, 2.0f, 1);
            d->ops->event_record(d, to_s2, NULL);
            d->ops->stream_wait(d, s2, to_s2);
            assert_int_equal(d->ops->launch_host(d, s2, add_one_fn, &a, &err), 0);
            d->ops->event_record(d, to_compute, s2);
            d->ops->stream_wait(d, NULL, to_compute);
        }
        dev_get(d, &x, dx, sizeof x);
        if (x != (float)((1 << (R + 1)) - 1)) wrong++;
        d->ops->event_free(d, to_s2);
        d->ops->event_free(d, to_compute);
        d->ops->stream_free(d, s2);
        d->ops->free(d, dx, sizeof x);
        close_sim(d);
    }
    unsetenv("DS_SIM_SEED");
    assert_int_equal(wrong, WAITS_ORDER ? 0 : 3);
}

typedef struct log_arg {
    ds_device *d;
    float *x;
    int *log, *n;
    int tag;
} log_arg;

/* Logs its tag and, when x is set, x's value as the stream sees it then. */
static int log_fn(void *arg, ds_err *err) {
    (void)err;
    log_arg *l = arg;
    l->log[(*l->n)++] = l->x ? (int)((float *)l->d->ops->alias(l->d, l->x))[0] : l->tag;
    return 0;
}

/* Host functions run in their stream's order, between the kernels queued around them. */
static void test_launch_host_in_order(void **state) {
    (void)state;
    enum { K = 12 };
    ds_device *d = open_sim("64MiB", "200");
    ds_err err = {{0}};
    float x = 1.0f;
    float *dx = dev_alloc(d, sizeof x);
    dev_put(d, dx, &x, sizeof x);
    int log[2 * K], n = 0, log2[K], n2 = 0;
    log_arg args[K], args2[K];
    ds_stream *s2 = d->ops->stream_new(d, &err);
    for (int i = 0; i < K; i++) {
        args[i] = (log_arg){d, dx, log, &n, 0};
        args2[i] = (log_arg){d, NULL, log2, &n2, i};
        d->k->scale(dx, 2.0f, 1);
        assert_int_equal(d->ops->launch_host(d, NULL, log_fn, &args[i], &err), 0);
        assert_int_equal(d->ops->launch_host(d, s2, log_fn, &args2[i], &err), 0);
    }
    dev_sync_ok(d);
    assert_int_equal(n, K);
    assert_int_equal(n2, K);
    for (int i = 0; i < K; i++) {
        assert_int_equal(log[i], 2 << i);
        assert_int_equal(log2[i], i);
    }
    d->ops->stream_free(d, s2);
    d->ops->free(d, dx, sizeof x);
    close_sim(d);
}

/* sync waits for every stream, not only the compute stream; stream_free runs what its
 * stream still holds before ending it. */
static void test_sync_waits_for_every_stream(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    ds_stream *s2 = d->ops->stream_new(d, &err), *s3 = d->ops->stream_new(d, &err);
    int done2 = 0, done3 = 0;
    assert_int_equal(d->ops->launch_host(d, s2, slow_fn, &done2, &err), 0);
    dev_sync_ok(d);
    assert_int_equal(done2, 1);
    assert_int_equal(d->ops->launch_host(d, s3, slow_fn, &done3, &err), 0);
    d->ops->stream_free(d, s3);
    assert_int_equal(done3, 1);
    d->ops->stream_free(d, s2);
    close_sim(d);
}

/* event_done says whether the stream has reached the event; event_sync waits for it. */
static void test_event_done_and_sync(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    ds_event *e = d->ops->event_new(d, &err), *never = d->ops->event_new(d, &err);
    assert_int_equal(d->ops->event_done(d, never), 1); /* never recorded: reached */
    assert_int_equal(d->ops->event_sync(d, never, &err), 0);
    latch gate;
    latch_init(&gate);
    assert_int_equal(d->ops->launch_host(d, NULL, gate_fn, &gate, &err), 0);
    d->ops->event_record(d, e, NULL);
    assert_int_equal(d->ops->event_done(d, e), 0);
    latch_set(&gate);
    assert_int_equal(d->ops->event_sync(d, e, &err), 0);
    assert_int_equal(d->ops->event_done(d, e), 1);
    d->ops->event_free(d, e);
    d->ops->event_free(d, never);
    latch_destroy(&gate);
    close_sim(d);
}

static int fail_fn(void *arg, ds_err *err) {
    (void)arg;
    return ds_err_set(err, "allreduce: peer 3 lost");
}

/* A host function's failure is the device's error, with its message, from then on. */
static void test_launch_host_failure_is_sticky(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    ds_stream *s2 = d->ops->stream_new(d, &err);
    ds_event *e = d->ops->event_new(d, &err);
    assert_int_equal(d->ops->launch_host(d, s2, fail_fn, NULL, &err), 0);
    d->ops->event_record(d, e, s2);
    assert_int_equal(d->ops->event_sync(d, e, &err), -1);
    assert_non_null(strstr(err.msg, "allreduce: peer 3 lost"));
    expect_sync_error(d, "allreduce: peer 3 lost");
    d->ops->stream_free(d, s2);
    d->ops->event_free(d, e);
    close_sim(d);
}

typedef struct nested {
    ds_device *d;
    int rc;
    ds_err err;
} nested;

static int sync_inside_fn(void *arg, ds_err *err) {
    (void)err;
    nested *n = arg;
    n->rc = n->d->ops->sync(n->d, &n->err);
    return 0;
}

/* Work on a stream cannot wait for the streams (it would wait for itself): refused. */
static void test_wait_from_a_stream_refused(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    ds_err err = {{0}};
    nested n = {.d = d};
    assert_int_equal(d->ops->launch_host(d, NULL, sync_inside_fn, &n, &err), 0);
    dev_sync_ok(d);
    assert_int_equal(n.rc, -1);
    assert_non_null(strstr(n.err.msg, "called from work running on a stream"));
    close_sim(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_event_orders_two_streams, close_left_open),
        cmocka_unit_test_teardown(test_ping_pong_under_delay, close_left_open),
        cmocka_unit_test_teardown(test_launch_host_in_order, close_left_open),
        cmocka_unit_test_teardown(test_sync_waits_for_every_stream, close_left_open),
        cmocka_unit_test_teardown(test_event_done_and_sync, close_left_open),
        cmocka_unit_test_teardown(test_launch_host_failure_is_sticky, close_left_open),
        cmocka_unit_test_teardown(test_wait_from_a_stream_refused, close_left_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
