/* The NCCL backend (GPU ranks on the cuda device, kernels/device.h). Rank 0 makes a
 * fresh unique id per open, so per attempt, and passes it through the store; the
 * communicator is made with ncclCommInitRank on the device's GPU; ops are enqueued on a
 * stream of the device (so the device's sync waits for them too), after an event on its
 * compute stream (so they see the kernels queued before them); a handle is a CUDA event.
 * ds_comm_wait makes the compute stream wait for that event and returns: the host goes
 * on queuing kernels while the collective runs. The synchronous forms wait on the host.
 *
 * A rank is never left blocked in NCCL: the communicator is non-blocking
 * (config.blocking = 0). A host wait polls it, and every op is watched from its issue to
 * its end by the communicator's watch thread (comm_watch.c), so also while the host is
 * blocked on the device (the loss read, a sync). Past the timeout, on an
 * asynchronous NCCL error, or when a peer published its failure in the store
 * (comm_peers.c: the first failing rank's message), the rank calls ncclCommAbort,
 * publishes its own failure for the others, makes it the device's sticky error (kernels
 * queued behind the op saw no data: the host's next wait on the device returns it) and
 * fails the op naming the peer. A job being stopped signals its ranks, which ends them
 * and their GPU work with them.
 *
 * Threads: NCCL allows one thread per communicator, but ncclCommAbort from another one
 * (non-blocking communicators). Here every call on comm is made under mu and checks that
 * it was not aborted; the watch thread calls only ncclCommGetAsyncError and
 * ncclCommAbort, and talks to the store through a client of its own (watch_peers).
 *
 * Built only with CUDA, into the CUDA backend (kernels/cuda_module.h), not into dsrun. */

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_backend.h"
#include "comm_watch.h"
#include "device.h"
#include "ds_clock.h"
#include "kernels_cuda.h"

/* How long a host wait may last before the store is asked about peers, and how often. */
#define PEERS_AFTER_MS DS_COMM_WATCH_PEERS_AFTER_MS
#define PEERS_EVERY_MS DS_COMM_WATCH_PEERS_EVERY_MS
/* How often the watch thread looks at the ops in flight. */
#define WATCH_POLL_MS 1

typedef struct nccl_be {
    pthread_mutex_t mu; /* comm and aborted, which the watch thread may abort */
    ncclComm_t comm;
    ds_device *dev;     /* the process's cuda device */
    ds_stream *dstream; /* dev's stream this communicator runs on */
    ds_event *ready;    /* recorded on dev's compute stream before each op */
    cudaStream_t stream; /* dstream as CUDA knows it */
    int *scratch;       /* one device int, for the barrier */
    int timeout_ms;
    int aborted;
    ds_comm_peers peers;       /* the main thread's client of the store */
    ds_comm_peers watch_peers; /* the watch thread's (store NULL: it asks no peer) */
    ds_comm_watch *watch;      /* the ops ds_comm_wait handed over, while they run */
    long long next_peers_look;
} nccl_be;

static void pause_briefly(void) {
    struct timespec ts = {0, 50 * 1000};
    nanosleep(&ts, NULL);
}

static int cuda_fail(ds_err *err, cudaError_t e, const char *what) {
    return ds_err_set(err, "%s: %s", what, cudaGetErrorString(e));
}

/* NCCL's last message says more than the code ("Duplicate GPU detected : rank 0 and
 * rank 1 both on CUDA device ...": two ranks on one GPU). */
static int nccl_fail(ds_err *err, ncclResult_t r, const char *what) {
    const char *last = ncclGetLastError(NULL);
    int more = last && *last;
    return ds_err_set(err, "%s: %s%s%s", what, ncclGetErrorString(r), more ? ": " : "",
                      more ? last : "");
}

/* Aborts the communicator (its kernels stop waiting for peers), makes why the device's
 * error and, unless a peer's failure is what stopped this rank, tells the peers through
 * p (the calling thread's client of the store). */
static void abort_comm_by(nccl_be *b, ds_comm_peers *p, const ds_err *why, int tell_peers) {
    /* first: the abort lets a host blocked on the device go on, and it must find why */
    ds_cuda_device_fail(b->dev, why->msg);
    pthread_mutex_lock(&b->mu);
    if (b->comm && !b->aborted) ncclCommAbort(b->comm);
    b->comm = NULL;
    b->aborted = 1;
    pthread_mutex_unlock(&b->mu);
    if (tell_peers) ds_comm_peers_publish(p, why->msg);
}

static void abort_comm(nccl_be *b, const ds_err *why, int tell_peers) {
    abort_comm_by(b, &b->peers, why, tell_peers);
}

/* -1 with err when the communicator was aborted (by the watch: err says why). */
static int aborted(nccl_be *b, ds_err *err) {
    pthread_mutex_lock(&b->mu);
    int a = b->aborted;
    pthread_mutex_unlock(&b->mu);
    if (!a) return 0;
    ds_err why;
    if (b->watch && ds_comm_watch_stopped(b->watch, &why))
        return ds_err_set(err, "nccl: the communicator was aborted: %s", why.msg);
    return ds_err_set(err, "nccl: the communicator was aborted earlier");
}

/* ncclCommGetAsyncError under mu: st = its state (ncclSuccess once aborted: the abort's
 * reason is reported by whoever aborted). */
static ncclResult_t async_state(nccl_be *b) {
    ncclResult_t st = ncclSuccess;
    pthread_mutex_lock(&b->mu);
    if (b->comm && !b->aborted) {
        ncclResult_t r = ncclCommGetAsyncError(b->comm, &st);
        if (r != ncclSuccess) st = r;
    }
    pthread_mutex_unlock(&b->mu);
    return st;
}

/* 1 with err filled (and the communicator aborted) when a peer has failed; asked of
 * the store once the op has waited PEERS_AFTER_MS, then every PEERS_EVERY_MS. */
static int peer_failed(nccl_be *b, long long started, const char *what, ds_err *err) {
    long long now = ds_now_ms();
    if (now - started < PEERS_AFTER_MS || now < b->next_peers_look) return 0;
    b->next_peers_look = now + PEERS_EVERY_MS;
    if (!ds_comm_peers_failed(&b->peers, what, err)) return 0;
    abort_comm(b, err, 0);
    return 1;
}

/* Polls the communicator until no call is in progress: aborting it past the deadline,
 * on an asynchronous error or a peer's failure. */
static int nccl_settle(nccl_be *b, const char *what, ds_err *err) {
    long long started = ds_now_ms(), deadline = started + b->timeout_ms;
    for (;;) {
        if (aborted(b, err)) return -1;
        ncclResult_t st = async_state(b);
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) {
            nccl_fail(err, st, what);
            abort_comm(b, err, 1);
            return -1;
        }
        if (peer_failed(b, started, what, err)) return -1;
        if (ds_now_ms() > deadline) {
            ds_err_set(err, "%s: timed out after %d ms", what, b->timeout_ms);
            abort_comm(b, err, 1);
            return -1;
        }
        pause_briefly();
    }
}

static ncclDataType_t nccl_type(ds_dtype dt) {
    switch (dt) {
    case DS_F32: return ncclFloat32;
    case DS_BF16: return ncclBfloat16;
    case DS_F16: return ncclFloat16;
    case DS_I32: return ncclInt32;
    }
    return ncclFloat32;
}

/* ncclAvg on floating types multiplies each input by 1/world before the sum (NCCL's
 * pre-multiplied sum): a 16-bit average cannot overflow where the sum would. */
static int nccl_enqueue(nccl_be *b, ds_comm_handle *h, ds_err *err) {
    pthread_mutex_lock(&b->mu);
    if (b->aborted) {
        pthread_mutex_unlock(&b->mu);
        return aborted(b, err);
    }
    b->dev->ops->event_record(b->dev, b->ready, NULL);
    b->dev->ops->stream_wait(b->dev, b->dstream, b->ready);
    ncclRedOp_t op = h->op == DS_COMM_AVG ? ncclAvg : ncclSum;
    ncclDataType_t t = nccl_type(h->dtype);
    ncclResult_t r = ncclSuccess;
    switch (h->kind) {
    case DS_COMM_OP_ALLREDUCE:
        r = ncclAllReduce(h->in, h->out, h->count, t, op, b->comm, b->stream);
        break;
    case DS_COMM_OP_REDUCE_SCATTER:
        r = ncclReduceScatter(h->in, h->out, h->count, t, op, b->comm, b->stream);
        break;
    case DS_COMM_OP_ALLGATHER:
        r = ncclAllGather(h->in, h->out, h->count, t, b->comm, b->stream);
        break;
    case DS_COMM_OP_BROADCAST:
        r = ncclBroadcast(h->in, h->out, h->count, t, h->root, b->comm, b->stream);
        break;
    case DS_COMM_OP_BARRIER:
        r = ncclAllReduce(b->scratch, b->scratch, 1, ncclInt32, ncclSum, b->comm, b->stream);
        break;
    }
    pthread_mutex_unlock(&b->mu);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_fail(err, r, "nccl enqueue");
        abort_comm(b, err, 1);
        return -1;
    }
    return 0;
}

static int completion_event(nccl_be *b, cudaEvent_t *ev, ds_err *err) {
    cudaError_t ce = cudaEventCreateWithFlags(ev, cudaEventDisableTiming);
    if (ce != cudaSuccess) return cuda_fail(err, ce, "creating the completion event");
    if ((ce = cudaEventRecord(*ev, b->stream)) != cudaSuccess) {
        cudaEventDestroy(*ev);
        return cuda_fail(err, ce, "recording the completion event");
    }
    return 0;
}

/* Without a client of its own the watch asks no peer: the host does, at each op, while
 * the watch has ops in flight. */
static int peers_at_issue(nccl_be *b, ds_err *err) {
    if (b->watch_peers.store || !ds_comm_watch_pending(b->watch)) return 0;
    return peer_failed(b, 0, "nccl op", err) ? -1 : 0;
}

static int nccl_run(void *be, ds_comm_handle *h, ds_err *err) {
    nccl_be *b = be;
    if (peers_at_issue(b, err) != 0 || nccl_enqueue(b, h, err) != 0) return -1;
    if (nccl_settle(b, "nccl enqueue", err) != 0) return -1;
    /* Two events at the op's end: the handle's, and the watch's, which looks after the
     * op from here until it ends (waited for or not: a device sync waits for it too). */
    cudaEvent_t ev, watched;
    if (completion_event(b, &ev, err) != 0) return -1;
    if (completion_event(b, &watched, err) != 0) {
        cudaEventDestroy(ev);
        return -1;
    }
    if (ds_comm_watch_add(b->watch, watched, ds_now_ms(), err) != 0) {
        cudaEventDestroy(ev);
        return -1;
    }
    h->backend_data = ev;
    return 0;
}

static int nccl_poll(void *be, ds_comm_handle *h) {
    (void)be;
    return cudaEventQuery((cudaEvent_t)h->backend_data) != cudaErrorNotReady;
}

/* Waits for the op's event, watching the communicator and the peers. */
static int nccl_finish(void *be, ds_comm_handle *h, ds_err *err) {
    nccl_be *b = be;
    cudaEvent_t ev = h->backend_data;
    long long started = ds_now_ms(), deadline = started + b->timeout_ms;
    int rc = 0;
    for (;;) {
        cudaError_t ce = cudaEventQuery(ev);
        if (ce == cudaSuccess) break;
        if (ce != cudaErrorNotReady) {
            rc = cuda_fail(err, ce, "nccl op");
            abort_comm(b, err, 1);
            break;
        }
        if ((rc = aborted(b, err)) != 0) break;
        ncclResult_t st = async_state(b);
        if (st != ncclSuccess && st != ncclInProgress) {
            rc = nccl_fail(err, st, "nccl op");
            abort_comm(b, err, 1);
            break;
        }
        if (peer_failed(b, started, "nccl op", err)) {
            rc = -1;
            break;
        }
        if (ds_now_ms() > deadline) {
            rc = ds_err_set(err, "nccl op: timed out after %d ms", b->timeout_ms);
            abort_comm(b, err, 1);
            break;
        }
        pause_briefly();
    }
    cudaEventDestroy(ev);
    /* an op the watch aborted ends too, with no data */
    return rc == 0 ? aborted(b, err) : rc;
}

/* ds_comm_wait: the compute stream's later work waits for the op's event, the host
 * does not (the watch thread looks after the op until it ends). An event may be
 * destroyed once a stream's wait for it is queued. */
static int nccl_order(void *be, ds_comm_handle *h, ds_err *err) {
    nccl_be *b = be;
    cudaEvent_t ev = h->backend_data;
    h->backend_data = NULL;
    b->dev->ops->stream_wait(b->dev, NULL, (ds_event *)ev); /* a cuda ds_event is the event */
    cudaEventDestroy(ev);
    return aborted(b, err);
}

/* ---- the watch's questions (comm_watch.h), asked on its thread ---------------------- */

static int w_op_state(void *be, void *op, ds_err *err) {
    (void)be;
    cudaError_t ce = cudaEventQuery((cudaEvent_t)op);
    if (ce == cudaSuccess) return 1;
    if (ce == cudaErrorNotReady) return 0;
    ds_err_set(err, "%s", cudaGetErrorString(ce));
    return -1;
}

static void w_op_free(void *be, void *op) {
    (void)be;
    cudaEventDestroy((cudaEvent_t)op);
}

static int w_comm_error(void *be, ds_err *err) {
    ncclResult_t st = async_state(be);
    if (st == ncclSuccess || st == ncclInProgress) return 0;
    nccl_fail(err, st, "nccl op");
    return 1;
}

static int w_peer_failed(void *be, ds_err *err) {
    nccl_be *b = be;
    return ds_comm_peers_failed(&b->watch_peers, "nccl op", err);
}

static void w_stop(void *be, const ds_err *why, int tell_peers) {
    nccl_be *b = be;
    /* without a client of its own the watch cannot tell the peers: the host's next op
     * fails with why, and the rank's exit is what its peers see */
    abort_comm_by(b, &b->watch_peers, why, tell_peers && b->watch_peers.store);
}

static void w_on_thread(void *be) {
    nccl_be *b = be;
    cudaSetDevice(b->dev->index); /* the events and the communicator are that GPU's */
}

static const ds_comm_watch_ops watch_ops = {w_op_state, w_op_free,     w_comm_error,
                                            w_peer_failed, w_stop, w_on_thread};

static void nccl_close(void *be) {
    nccl_be *b = be;
    ds_comm_watch_free(b->watch); /* its thread ends; ops still queued run on regardless */
    b->watch = NULL;
    if (b->comm) {
        /* Finalize flushes what is queued, so Destroy need not block on peers */
        ncclResult_t r = ncclCommFinalize(b->comm);
        ds_err err = {{0}};
        if ((r == ncclSuccess || r == ncclInProgress) && nccl_settle(b, "ncclCommFinalize", &err) == 0)
            ncclCommDestroy(b->comm);
        else if (b->comm)
            ncclCommAbort(b->comm);
    }
    if (b->scratch) cudaFree(b->scratch);
    if (b->ready) b->dev->ops->event_free(b->dev, b->ready);
    if (b->dstream) b->dev->ops->stream_free(b->dev, b->dstream);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

static const ds_comm_vtable nccl_vtable = {
    .backend = DS_COMM_NCCL,
    .threaded = 0,
    .native_avg = 1,
    .run = nccl_run,
    .finish = nccl_finish,
    .poll = nccl_poll,
    .order = nccl_order,
    .close = nccl_close,
};

static int make_unique_id(void *id, size_t len, ds_err *err) {
    (void)len;
    ncclResult_t r = ncclGetUniqueId((ncclUniqueId *)id);
    return r == ncclSuccess ? 0 : nccl_fail(err, r, "ncclGetUniqueId");
}

/* The device (cuda: comm.c checked), its stream, an event and the barrier's int; the
 * device's GPU current. */
static int nccl_setup(nccl_be *b, ds_err *err) {
    ds_device *dev = ds_device_get();
    b->dev = dev;
    cudaError_t ce = cudaSetDevice(dev->index);
    if (ce != cudaSuccess) return cuda_fail(err, ce, dev->name);
    if (!(b->dstream = dev->ops->stream_new(dev, err)) || !(b->ready = dev->ops->event_new(dev, err)))
        return -1;
    b->stream = (cudaStream_t)ds_cuda_device_stream(dev, b->dstream);
    if ((ce = cudaMalloc((void **)&b->scratch, sizeof(int))) != cudaSuccess)
        return cuda_fail(err, ce, "nccl: the barrier's device int");
    return 0;
}

/* Exported from the CUDA module (built with hidden visibility): runtime/comm's way in. */
__attribute__((visibility("default"))) void *ds_comm_nccl_open(const ds_comm_join *j,
                                                               const ds_comm_vtable **vt,
                                                               ds_err *err) {
    nccl_be *b = calloc(1, sizeof *b);
    if (!b) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    b->timeout_ms = j->timeout_ms;
    pthread_mutex_init(&b->mu, NULL);
    ds_comm_peers_init(&b->peers, j);
    ds_comm_peers_init(&b->watch_peers, j);
    b->watch_peers.store = j->watch_store;
    ncclUniqueId id;
    if (nccl_setup(b, err) != 0) {
        ds_comm_peers_publish(&b->peers, err->msg); /* the others stop waiting for this rank */
        goto fail;
    }
    if (ds_comm_peers_share(&b->peers, "nccl_id", &id, sizeof id, make_unique_id, j->timeout_ms,
                            err) != 0)
        goto fail;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&b->comm, j->world, id, j->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_fail(err, r, "ncclCommInitRankConfig");
        ds_comm_peers_publish(&b->peers, err->msg);
        if (b->comm) ncclCommAbort(b->comm);
        b->comm = NULL;
        goto fail;
    }
    if (nccl_settle(b, "ncclCommInitRankConfig", err) != 0) goto fail;
    if (!(b->watch = ds_comm_watch_new(&watch_ops, b, "nccl op", b->timeout_ms, err)) ||
        ds_comm_watch_start(b->watch, WATCH_POLL_MS, err) != 0) {
        abort_comm(b, err, 1);
        goto fail;
    }
    *vt = &nccl_vtable;
    return b;
fail:
    b->comm = NULL; /* aborted above, or never made */
    nccl_close(b);
    return NULL;
}

