/* A host backend (the world-of-one copy, Gloo) on device memory. Gloo reads and writes
 * host memory, so on a device whose memory the host cannot address (the simulator) each
 * op runs as a host function on a stream of the device: after the compute stream's work
 * so far (an event orders them), with its buffers made addressable there, and the
 * average, when the inner backend has none, done in the same function.
 *
 * Completion takes two forms. ds_comm_wait on an asynchronous op (order()) makes the
 * compute stream wait for the op's event and returns at once: the host goes on queuing
 * kernels while the collective runs, and the kernels that read its buffers run after it,
 * as on a GPU with NCCL on its own stream. An op that fails after its wait returned
 * reports its error as the device's asynchronous error (the next sync or to_host says
 * it). The synchronous forms (finish()) are the host waiting for the op's event: their
 * buffers may be host memory the caller reads next; the op's outcome is its own, not
 * the device's. (CUDA has NCCL for this and never comes here.) */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "comm_backend.h"
#include "device.h"

typedef struct dev_be {
    ds_comm_vtable vt; /* the inner backend's name, this way of running */
    const ds_comm_vtable *inner_vt;
    void *inner;
    int world;
    ds_device *dev;
    ds_stream *stream;
    ds_event *ready; /* recorded on the compute stream before each op */
    struct dev_op *retired; /* ordered ops, freed once their event is reached */
    pthread_mutex_t mu;     /* an op's ran / ordered */
} dev_be;

/* One op in flight: the handle's copy the stream runs, and how it ended. */
typedef struct dev_op {
    dev_be *b;
    ds_comm_handle h;
    ds_event *done;
    int rc;
    ds_err err;
    int ran;     /* the stream ran it (under mu) */
    int ordered; /* the host no longer waits for it: a failure is the device's (under mu) */
    struct dev_op *next;
} dev_op;

static int run_on_stream(void *arg, ds_err *err) {
    dev_op *op = arg;
    dev_be *b = op->b;
    ds_comm_handle h = op->h;
    h.in = b->dev->ops->alias(b->dev, h.in);
    h.out = b->dev->ops->alias(b->dev, h.out);
    op->rc = b->inner_vt->run(b->inner, &h, &op->err);
    if (op->rc == 0 && b->inner_vt->finish) op->rc = b->inner_vt->finish(b->inner, &h, &op->err);
    if (op->rc == 0 && h.op == DS_COMM_AVG && !b->inner_vt->native_avg &&
        (h.kind == DS_COMM_OP_ALLREDUCE || h.kind == DS_COMM_OP_REDUCE_SCATTER))
        ds_comm_average(h.out, h.count, h.dtype, b->world);
    pthread_mutex_lock(&b->mu);
    op->ran = 1;
    int ordered = op->ordered;
    pthread_mutex_unlock(&b->mu);
    if (op->rc == 0 || !ordered) return 0; /* a waited op's error is reported by its wait */
    return ds_err_set(err, "a collective of %zu elements on the communication stream: %s",
                      h.count, op->err.msg);
}

static void op_free(dev_be *b, dev_op *op) {
    b->dev->ops->event_free(b->dev, op->done);
    free(op);
}

/* Frees the ordered ops the stream is done with (all: after a sync). */
static void reap(dev_be *b, int all) {
    dev_op **p = &b->retired;
    while (*p) {
        dev_op *op = *p;
        if (all || b->dev->ops->event_done(b->dev, op->done)) {
            *p = op->next;
            op_free(b, op);
        } else {
            p = &op->next;
        }
    }
}

static int dev_run(void *be, ds_comm_handle *h, ds_err *err) {
    dev_be *b = be;
    ds_device *d = b->dev;
    reap(b, 0);
    dev_op *op = calloc(1, sizeof *op);
    if (!op) return ds_err_set(err, "out of memory");
    op->b = b;
    op->h = *h;
    if (!(op->done = d->ops->event_new(d, err))) {
        free(op);
        return -1;
    }
    d->ops->event_record(d, b->ready, NULL);
    d->ops->stream_wait(d, b->stream, b->ready);
    if (d->ops->launch_host(d, b->stream, run_on_stream, op, err) != 0) {
        d->ops->event_free(d, op->done);
        free(op);
        return -1;
    }
    d->ops->event_record(d, op->done, b->stream);
    h->backend_data = op;
    return 0;
}

static int dev_finish(void *be, ds_comm_handle *h, ds_err *err) {
    dev_be *b = be;
    dev_op *op = h->backend_data;
    int rc = b->dev->ops->event_sync(b->dev, op->done, err);
    if (op->rc != 0) rc = op->rc, *err = op->err; /* the op's own error before the device's */
    op_free(b, op);
    h->backend_data = NULL;
    return rc;
}

/* ds_comm_wait: the compute stream's later work waits for the op, the host does not.
 * An op that already ran reports its outcome here, as finish() would. */
static int dev_order(void *be, ds_comm_handle *h, ds_err *err) {
    dev_be *b = be;
    dev_op *op = h->backend_data;
    pthread_mutex_lock(&b->mu);
    int ran = op->ran;
    op->ordered = !ran;
    pthread_mutex_unlock(&b->mu);
    if (ran) return dev_finish(be, h, err); /* its event comes right after: no real wait */
    b->dev->ops->stream_wait(b->dev, NULL, op->done);
    op->next = b->retired;
    b->retired = op;
    h->backend_data = NULL;
    return 0;
}

static int dev_poll(void *be, ds_comm_handle *h) {
    dev_be *b = be;
    dev_op *op = h->backend_data;
    return b->dev->ops->event_done(b->dev, op->done);
}

static void dev_close(void *be) {
    dev_be *b = be;
    ds_err err;
    b->dev->ops->sync(b->dev, &err); /* nothing of ours still runs on the stream */
    reap(b, 1);
    b->inner_vt->close(b->inner);
    if (b->ready) b->dev->ops->event_free(b->dev, b->ready);
    if (b->stream) b->dev->ops->stream_free(b->dev, b->stream);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

void *ds_comm_on_device(const ds_comm_vtable *inner_vt, void *inner, int world,
                        const ds_comm_vtable **vt, ds_err *err) {
    ds_device *d = ds_device_get();
    dev_be *b = calloc(1, sizeof *b);
    if (!b || !d->ops->launch_host) {
        inner_vt->close(inner);
        free(b);
        return ds_err_set(err, b ? "device %s cannot run host collectives" : "out of memory",
                          d->name), NULL;
    }
    b->inner_vt = inner_vt, b->inner = inner, b->world = world, b->dev = d;
    pthread_mutex_init(&b->mu, NULL);
    if (!(b->stream = d->ops->stream_new(d, err)) || !(b->ready = d->ops->event_new(d, err))) {
        dev_close(b);
        return NULL;
    }
    b->vt = (ds_comm_vtable){.backend = inner_vt->backend, .threaded = 0, .native_avg = 1,
                             .run = dev_run, .finish = dev_finish, .order = dev_order,
                             .poll = dev_poll, .close = dev_close};
    *vt = &b->vt;
    return b;
}
