/* A host backend (the world-of-one copy, Gloo) on device memory. Gloo reads and writes
 * host memory, so on a device whose memory the host cannot address (the simulator) each
 * op runs as a host function on a stream of the device: after the compute stream's work
 * so far (an event orders them), with its buffers made addressable there, and the
 * average, when the inner backend has none, done in the same function. The wait is the
 * host waiting for the op's event; the op's outcome is its own, not the device's.
 * (CUDA has NCCL for this and never comes here.) */
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
} dev_be;

/* One op in flight: the handle's copy the stream runs, and how it ended. */
typedef struct dev_op {
    dev_be *b;
    ds_comm_handle h;
    ds_event *done;
    int rc;
    ds_err err;
} dev_op;

static int run_on_stream(void *arg, ds_err *unused) {
    (void)unused;
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
    return 0; /* a failed collective is this op's error, reported by its wait */
}

static int dev_run(void *be, ds_comm_handle *h, ds_err *err) {
    dev_be *b = be;
    ds_device *d = b->dev;
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
    if (rc == 0 && (rc = op->rc) != 0) *err = op->err;
    b->dev->ops->event_free(b->dev, op->done);
    free(op);
    h->backend_data = NULL;
    return rc;
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
    b->inner_vt->close(b->inner);
    if (b->ready) b->dev->ops->event_free(b->dev, b->ready);
    if (b->stream) b->dev->ops->stream_free(b->dev, b->stream);
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
    if (!(b->stream = d->ops->stream_new(d, err)) || !(b->ready = d->ops->event_new(d, err))) {
        dev_close(b);
        return NULL;
    }
    b->vt = (ds_comm_vtable){.backend = inner_vt->backend, .threaded = 0, .native_avg = 1,
                             .run = dev_run, .finish = dev_finish, .poll = dev_poll,
                             .close = dev_close};
    *vt = &b->vt;
    return b;
}
