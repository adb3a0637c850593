/* A communicator on the simulated device (comm_device.c): ds_comm_wait on an
 * asynchronous op orders the compute stream after the op and does not hold the host,
 * and the kernels queued after the wait see the op's result; the synchronous forms
 * still return with the op complete, on host buffers too. A gate (sim_testutil.h) holds
 * the compute stream, so the op cannot have run when the wait returns: a wait that
 * blocked the host would be released only by the test's watchdog, which the test sees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "comm.h"
#include "ds_context.h"
#include "sim_testutil.h"

enum { N = 1 << 22 }; /* a copy long enough that a kernel not ordered after it runs first */

static ds_device *open_device(void) {
    ds_err err = {{0}};
    setenv("DS_SIM_MEMORY", "64MiB", 1);
    if (ds_device_open("sim", 0, &err) != 0) fprintf(stderr, "open sim: %s\n", err.msg);
    ds_device *d = ds_device_get();
    assert_int_equal(d->kind, DS_DEV_SIM);
    return d;
}

static ds_comm *open_comm(void) {
    ds_context ctx;
    ds_context_single(&ctx);
    ds_err err = {{0}};
    ds_comm *c = ds_comm_open(&ctx, &err);
    if (!c) fprintf(stderr, "comm: %s\n", err.msg);
    assert_non_null(c);
    return c;
}

/* Opens the gate after 20 s unless the test did first: forced = 1 then. */
typedef struct watchdog {
    latch returned, gate;
    int forced;
} watchdog;

static void *watch(void *arg) {
    watchdog *w = arg;
    if (!latch_wait(&w->returned, 20000)) w->forced = 1;
    latch_set(&w->gate);
    return NULL;
}

static void test_wait_orders_the_stream(void **state) {
    ds_device *d = *state;
    ds_comm *c = open_comm();
    ds_err err = {{0}};
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.5f;
    float *dx = dev_alloc(d, N * sizeof *x), *dy = dev_alloc(d, N * sizeof *y);
    dev_put(d, dx, x, N * sizeof *x);

    watchdog w = {.forced = 0};
    latch_init(&w.returned), latch_init(&w.gate);
    assert_int_equal(d->ops->launch_host(d, NULL, gate_fn, &w.gate, &err), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, watch, &w), 0);
    ds_comm_handle *h = ds_comm_iallgather(c, dx, dy, N, DS_F32, &err);
    assert_non_null(h);
    assert_int_equal(ds_comm_wait(h, &err), 0);
    latch_set(&w.returned); /* the op cannot have run yet: the gate holds what it follows */
    d->k->scale(dy, 2.0f, N); /* must see the gathered values */
    dev_get(d, y, dy, N * sizeof *y);
    pthread_join(t, NULL);
    assert_int_equal(w.forced, 0);
    for (int i = 0; i < N; i++)
        if (y[i] != 2.0f * x[i]) {
            fprintf(stderr, "y[%d] = %g, want %g\n", i, (double)y[i], 2.0 * x[i]);
            fail();
        }
    d->ops->free(d, dx, N * sizeof *x), d->ops->free(d, dy, N * sizeof *y);
    dev_sync_ok(d);
    latch_destroy(&w.returned), latch_destroy(&w.gate);
    free(x), free(y);
    ds_comm_close(c);
}

/* A synchronous op on host memory (what a vote among ranks uses) is done on return. */
static void test_sync_form_on_host_memory(void **state) {
    (void)state;
    ds_comm *c = open_comm();
    ds_err err = {{0}};
    int32_t votes[3] = {4, 5, 6};
    assert_int_equal(ds_comm_allreduce(c, votes, 3, DS_I32, DS_COMM_SUM, &err), 0);
    assert_int_equal(votes[2], 6);
    float b[4] = {1, 2, 3, 4}, g[4] = {0};
    assert_int_equal(ds_comm_allgather(c, b, g, 4, DS_F32, &err), 0);
    assert_memory_equal(b, g, sizeof b);
    ds_comm_close(c);
}

static int setup(void **state) {
    *state = open_device();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wait_orders_the_stream),
        cmocka_unit_test(test_sync_form_on_host_memory),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
