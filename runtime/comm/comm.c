/* The backend-independent part of a communicator: opening (options, the arrival
 * check that names missing ranks), argument checks, handles, and the communication
 * thread that runs a threaded backend's ops in issue order. */
#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_backend.h"
#include "device.h"
#include "ds_clock.h"
#include "ds_progress.h"
#include "kernels.h" /* ds_half_scale: the 16-bit average */
#include "tensor_half.h"

#define DS_COMM_DEFAULT_TIMEOUT_MS 120000

struct ds_comm {
    int rank, world;
    char addr[256]; /* this rank's address: errors name it */
    const ds_comm_vtable *vt;
    void *be;
    uint32_t next_tag;

    /* Threaded backends: the queue of issued ops, run in order by `thread`. */
    pthread_t thread;
    int has_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* queue grew, an op finished, or stopping */
    ds_comm_handle *head, *tail;
    int busy; /* the thread is running an op */
    int stopping;

    /* The first transport error; once set every op fails with it (under mu). */
    int broken;
    ds_err broken_err;
};

const char *ds_comm_backend_name(ds_comm_backend b) {
    switch (b) {
    case DS_COMM_AUTO: return "auto";
    case DS_COMM_SELF: return "self";
    case DS_COMM_GLOO: return "gloo";
    case DS_COMM_NCCL: return "nccl";
    }
    return "?";
}

int ds_comm_is_broken(ds_comm *c) {
    if (!c) return 0;
    pthread_mutex_lock(&c->mu);
    int b = c->broken;
    pthread_mutex_unlock(&c->mu);
    return b;
}

int ds_comm_rank(const ds_comm *c) { return c->rank; }
int ds_comm_size(const ds_comm *c) { return c->world; }
ds_comm_backend ds_comm_backend_of(const ds_comm *c) { return c->vt->backend; }

/* ---- opening ---- */

static int env_backend(ds_comm_backend *b, ds_err *err) {
    const char *s = getenv("DS_COMM_BACKEND");
    if (!s || !*s) return 0;
    if (strcmp(s, "gloo") == 0) *b = DS_COMM_GLOO;
    else if (strcmp(s, "nccl") == 0) *b = DS_COMM_NCCL;
    else return ds_err_set(err, "DS_COMM_BACKEND=%s: expected gloo or nccl", s);
    return 0;
}

static int env_timeout(int *ms, ds_err *err) {
    const char *s = getenv("DS_COMM_TIMEOUT_MS");
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0 || v > INT_MAX)
        return ds_err_set(err, "DS_COMM_TIMEOUT_MS=%s: expected a positive number of ms", s);
    *ms = (int)v;
    return 0;
}

/* Fills *o from opts, the environment and ctx, in that order of precedence. */
static int resolve_opts(const ds_context *ctx, const ds_comm_opts *opts, ds_comm_opts *o,
                        ds_err *err) {
    memset(o, 0, sizeof *o);
    if (opts) *o = *opts;
    if (o->backend == DS_COMM_AUTO) {
        if (ctx->world_size == 1) o->backend = DS_COMM_SELF;
        else {
            /* a GPU's ranks talk through NCCL on its streams, CPU ranks through Gloo */
            o->backend = ds_device_get()->kind == DS_DEV_CUDA ? DS_COMM_NCCL : DS_COMM_GLOO;
            if (env_backend(&o->backend, err) != 0) return -1;
        }
    }
    if (o->timeout_ms <= 0) {
        o->timeout_ms = DS_COMM_DEFAULT_TIMEOUT_MS;
        if (env_timeout(&o->timeout_ms, err) != 0) return -1;
    }
    if (!o->node_addr || !*o->node_addr) {
        const char *a = getenv("DS_NODE_ADDR");
        o->node_addr = a && *a ? a : ctx->host;
    }
    return 0;
}

#ifdef DS_HAVE_CUDA
#include "cuda_module.h"

/* Defined where the CUDA backend is linked in (tests, benchmarks); NULL in dsrun. */
#pragma weak ds_comm_nccl_open

/* NCCL runs on the rank's cuda device, so the CUDA backend is there already: linked in,
 * or loaded when the device was opened. Failing, the rank tells its peers at once. */
static void *nccl_open(const ds_comm_join *j, const ds_comm_vtable **vt, ds_err *err) {
    ds_device *d = ds_device_get();
    typedef void *open_fn(const ds_comm_join *, const ds_comm_vtable **, ds_err *);
    open_fn *nccl = ds_comm_nccl_open;
    if (d->kind != DS_DEV_CUDA)
        ds_err_set(err, "nccl: no CUDA device: this rank runs on %s ([engine] device = cuda "
                        "puts it on its GPU)", d->name);
    else if (nccl || (nccl = (open_fn *)ds_cuda_module_symbol("ds_comm_nccl_open", err)))
        return nccl(j, vt, err);
    ds_comm_peers p;
    ds_comm_peers_init(&p, j);
    ds_comm_peers_publish(&p, err->msg); /* the others stop waiting for this rank */
    return NULL;
}
#endif

/* Each rank announces itself and waits for all: a barrier the store counts (one request
 * per rank, one per node through the agents: store_barrier.c), so its cost grows with the
 * world, not its square; a timeout lists who never came. */
static int arrive(const ds_comm_join *j, ds_err *err) {
    char key[256];
    snprintf(key, sizeof key, "%sarrived", j->prefix);
    int rc = ds_store_barrier_arrive(j->store, key, j->rank, j->world, j->timeout_ms, err);
    if (rc <= 0) return rc;
    int arrived = 0, missing = 0, nlisted = 0;
    char list[200];
    ds_err why;
    if (ds_store_barrier_who(j->store, key, j->world, &arrived, &missing, list, sizeof list, &nlisted, &why) != 0)
        return ds_err_set(err, "rendezvous timed out after %d ms; asking who arrived: %s", j->timeout_ms, why.msg);
    char more[32] = "";
    if (missing > nlisted) snprintf(more, sizeof more, " and %d more", missing - nlisted);
    return ds_err_set(err, "rendezvous timed out after %d ms: %d of %d ranks never arrived: %s%s", j->timeout_ms,
                      missing, j->world, list, more);
}

static void *comm_thread_main(void *arg);

static ds_comm *comm_new(int rank, int world, const char *addr, ds_err *err) {
    ds_comm *c = calloc(1, sizeof *c);
    if (!c) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    c->rank = rank;
    c->world = world;
    snprintf(c->addr, sizeof c->addr, "%s", addr);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return c;
}

static int start_thread(ds_comm *c, ds_err *err) {
    /* The thread takes no signals: they belong to the rank's main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = pthread_create(&c->thread, NULL, comm_thread_main, c);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) return ds_err_errno(err, rc, "comm: starting the communication thread");
    c->has_thread = 1;
    return 0;
}

ds_comm *ds_comm_open_opts(const ds_context *ctx, const ds_comm_opts *opts, ds_err *err) {
    static atomic_int opens; /* counts this process's opens: keys of each are apart */
    ds_comm_opts o;
    if (!ctx) {
        ds_err_set(err, "comm: no context");
        return NULL;
    }
    if (ctx->world_size < 1 || ctx->rank < 0 || ctx->rank >= ctx->world_size) {
        ds_err_set(err, "comm: rank %d outside world of %d", ctx->rank, ctx->world_size);
        return NULL;
    }
    if (resolve_opts(ctx, opts, &o, err) != 0) return NULL;
    int n = atomic_fetch_add(&opens, 1);

    ds_comm *c = comm_new(ctx->rank, ctx->world_size, o.node_addr, err);
    if (!c) return NULL;
    if (o.backend == DS_COMM_SELF) {
        if (ctx->world_size != 1) {
            ds_err_set(err, "comm: the self backend needs a world of one, not %d",
                       ctx->world_size);
            goto fail;
        }
        ds_device *d = ds_device_get();
        if (!ds_device_is_host(d) && !d->ops->launch_host) /* cuda: copies on its stream */
            c->be = ds_comm_self_device_open(d, &c->vt, err);
        else if ((c->be = ds_comm_self_open(&c->vt, err)) && !ds_device_is_host(d))
            c->be = ds_comm_on_device(c->vt, c->be, c->world, &c->vt, err);
        if (!c->be) goto fail;
        return c;
    }
    if (!ctx->store) {
        ds_err_set(err, "comm rank %d: a world of %d needs the rendezvous store", ctx->rank,
                   ctx->world_size);
        goto fail;
    }
    char prefix[128];
    snprintf(prefix, sizeof prefix, "comm/%d/%d/", ctx->attempt, n);
    ds_comm_join j = {.rank = ctx->rank, .world = ctx->world_size, .store = ctx->store,
                      .watch_store = ctx->watch_store, .prefix = prefix,
                      .node_addr = o.node_addr, .timeout_ms = o.timeout_ms};
    if (arrive(&j, err) != 0) goto fail_ctx;
    if (o.backend == DS_COMM_GLOO) {
        c->be = ds_comm_gloo_open(&j, &c->vt, err);
    } else if (o.backend == DS_COMM_NCCL) {
#ifdef DS_HAVE_CUDA
        c->be = nccl_open(&j, &c->vt, err);
#else
        ds_err_set(err, "nccl: this build has no CUDA");
#endif
    } else {
        ds_err_set(err, "unknown backend %d", (int)o.backend);
    }
    if (c->be && o.backend == DS_COMM_GLOO && !ds_device_is_host(ds_device_get()))
        c->be = ds_comm_on_device(c->vt, c->be, c->world, &c->vt, err);
    if (!c->be) goto fail_ctx;
    if (c->vt->threaded && start_thread(c, err) != 0) {
        c->vt->close(c->be);
        goto fail;
    }
    return c;
fail_ctx:
    ds_err_prefix(err, "comm rank %d of %d (%s, %s, attempt %d)", ctx->rank, ctx->world_size,
                  o.node_addr, ds_comm_backend_name(o.backend), ctx->attempt);
fail:
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return NULL;
}

ds_comm *ds_comm_open(const ds_context *ctx, ds_err *err) {
    return ds_comm_open_opts(ctx, NULL, err);
}

void ds_comm_close(ds_comm *c) {
    if (!c) return;
    if (c->has_thread) {
        pthread_mutex_lock(&c->mu);
        c->stopping = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->thread, NULL);
    }
    c->vt->close(c->be);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

/* ---- running ops ---- */

static const char *op_name(ds_comm_kind k) {
    switch (k) {
    case DS_COMM_OP_ALLREDUCE: return "allreduce";
    case DS_COMM_OP_REDUCE_SCATTER: return "reduce-scatter";
    case DS_COMM_OP_ALLGATHER: return "allgather";
    case DS_COMM_OP_BROADCAST: return "broadcast";
    case DS_COMM_OP_BARRIER: return "barrier";
    }
    return "?";
}

void ds_comm_average(void *out, size_t count, ds_dtype dt, int world) {
    if (dt == DS_BF16 || dt == DS_F16) {
        ds_half_scale(ds_half_of(dt), out, 1.0f / (float)world, count);
        return;
    }
    float *p = out;
    for (size_t i = 0; i < count; i++) p[i] /= (float)world;
}

/* After a successful sum, DS_COMM_AVG divides by the world size, unless the backend
 * does it itself. */
static void finish_avg(ds_comm_handle *h) {
    ds_comm *c = h->comm;
    if (h->op != DS_COMM_AVG || c->vt->native_avg) return;
    ds_comm_average(h->out, h->count, h->dtype, c->world);
}

/* Runs one op: to completion (threaded backends, on the thread; self), or until it is
 * enqueued (NCCL: finish() completes it). Zero-size ops other than the barrier do
 * nothing anywhere, so every rank skips them alike. */
static int run_op(ds_comm_handle *h) {
    ds_comm *c = h->comm;
    if (h->kind != DS_COMM_OP_BARRIER && h->count == 0) return 0;
    h->ran = 1;
    if (c->vt->run(c->be, h, &h->err) != 0) return -1;
    if (c->vt->finish) return 0;
    if (h->kind == DS_COMM_OP_ALLREDUCE || h->kind == DS_COMM_OP_REDUCE_SCATTER) finish_avg(h);
    return 0;
}

/* Records the op's outcome; the first failure breaks the communicator. Called with mu. */
static void settle(ds_comm_handle *h, int rc) {
    ds_comm *c = h->comm;
    if (rc != 0) {
        ds_err_prefix(&h->err, "comm rank %d of %d (%s, %s): %s of %zu %s", c->rank, c->world,
                      c->addr, ds_comm_backend_name(c->vt->backend), op_name(h->kind),
                      h->count, ds_dtype_name(h->dtype));
        if (!c->broken) {
            c->broken = 1;
            c->broken_err = h->err;
        }
    }
    h->rc = rc;
    h->done = 1;
}

static void *comm_thread_main(void *arg) {
    ds_comm *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->head && !c->stopping) pthread_cond_wait(&c->cv, &c->mu);
        if (!c->head) break; /* stopping, and nothing left to run */
        ds_comm_handle *h = c->head;
        c->head = h->next;
        if (!c->head) c->tail = NULL;
        int broken = c->broken;
        if (broken) h->err = c->broken_err;
        c->busy = 1;
        pthread_mutex_unlock(&c->mu);
        int rc = broken ? -1 : run_op(h);
        pthread_mutex_lock(&c->mu);
        c->busy = 0;
        if (broken) {
            h->rc = -1;
            h->done = 1;
        } else {
            settle(h, rc);
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int check_reduce(ds_dtype dt, ds_comm_reduce op, ds_err *err) {
    if (op == DS_COMM_AVG && dt == DS_I32)
        return ds_err_set(err, "average needs a floating-point dtype, not %s", ds_dtype_name(dt));
    if (op != DS_COMM_SUM && op != DS_COMM_AVG) return ds_err_set(err, "unknown reduction %d", (int)op);
    return 0;
}

/* Checks the shape of h against c; fills err without context (prepare() adds it). */
static int check_op(ds_comm *c, const ds_comm_handle *h, ds_err *err) {
    if ((unsigned)h->dtype > DS_I32) return ds_err_set(err, "unknown dtype %d", (int)h->dtype);
    size_t esize = ds_dtype_size(h->dtype);
    size_t per = h->kind == DS_COMM_OP_REDUCE_SCATTER || h->kind == DS_COMM_OP_ALLGATHER
                     ? (size_t)c->world : 1;
    if (h->count > SIZE_MAX / esize / per) return ds_err_set(err, "count %zu overflows", h->count);
    if (h->kind != DS_COMM_OP_BARRIER && h->count > 0 && (!h->in || !h->out))
        return ds_err_set(err, "NULL buffer");
    if (h->kind == DS_COMM_OP_ALLREDUCE || h->kind == DS_COMM_OP_REDUCE_SCATTER)
        if (check_reduce(h->dtype, h->op, err) != 0) return -1;
    if (h->kind == DS_COMM_OP_BROADCAST && (h->root < 0 || h->root >= c->world))
        return ds_err_set(err, "root %d outside world of %d", h->root, c->world);
    return 0;
}

/* Validates h, refuses it on a broken communicator, and gives it its sequence number. */
static int prepare(ds_comm *c, ds_comm_handle *h, ds_err *err) {
    if (!c) return ds_err_set(err, "comm: NULL communicator");
    if (check_op(c, h, err) != 0)
        return ds_err_prefix(err, "comm rank %d: %s", c->rank, op_name(h->kind));
    pthread_mutex_lock(&c->mu);
    int broken = c->broken;
    if (broken && err) *err = c->broken_err;
    pthread_mutex_unlock(&c->mu);
    if (broken)
        return ds_err_prefix(err, "comm rank %d: %s refused: the communicator broke earlier",
                             c->rank, op_name(h->kind));
    h->comm = c;
    h->tag = c->next_tag++;
    h->err.msg[0] = 0;
    return 0;
}

/* Hands a prepared op to the thread (threaded backends) or runs / enqueues it now. */
static ds_comm_handle *dispatch(ds_comm *c, const ds_comm_handle *proto, ds_err *err) {
    ds_comm_handle *h = malloc(sizeof *h);
    if (!h) {
        ds_err_set(err, "comm rank %d: out of memory", c->rank);
        return NULL;
    }
    *h = *proto;
    if (c->vt->threaded) {
        pthread_mutex_lock(&c->mu);
        if (c->tail) c->tail->next = h;
        else c->head = h;
        c->tail = h;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        return h;
    }
    int rc = run_op(h);
    pthread_mutex_lock(&c->mu);
    settle(h, rc);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0) {
        if (err) *err = h->err;
        free(h);
        return NULL;
    }
    if (c->vt->finish && h->ran) h->done = 0; /* NCCL: pending until finish() */
    return h;
}

/* Nanoseconds callers spent blocked in collectives (ds_comm_wait and the synchronous
 * forms), over the whole process: what communication cost the caller after overlap. */
static _Atomic uint64_t waited_ns;

static void count_wait(double t0) {
    double dt = ds_now_s() - t0;
    if (dt > 0) atomic_fetch_add_explicit(&waited_ns, (uint64_t)(dt * 1e9), memory_order_relaxed);
}

double ds_comm_wait_seconds(void) {
    return (double)atomic_load_explicit(&waited_ns, memory_order_relaxed) / 1e9;
}

static int wait_untimed(ds_comm_handle *h, ds_err *err);

static ds_comm_handle *issue(ds_comm *c, ds_comm_handle proto, ds_err *err) {
    if (prepare(c, &proto, err) != 0) return NULL;
    return dispatch(c, &proto, err);
}

/* A synchronous op. When the thread is idle and nothing is queued it runs right here
 * instead: the order is the same (only the one issuing thread could queue anything),
 * the Gloo context is still used by one thread at a time, and a small op saves two
 * thread wake-ups. */
static int run_sync_timed(ds_comm *c, ds_comm_handle proto, ds_err *err);

static int run_sync(ds_comm *c, ds_comm_handle proto, ds_err *err) {
    double t0 = ds_now_s();
    int rc = run_sync_timed(c, proto, err);
    count_wait(t0);
    return rc;
}

static int run_sync_timed(ds_comm *c, ds_comm_handle proto, ds_err *err) {
    if (prepare(c, &proto, err) != 0) return -1;
    int inline_ok = 1;
    if (c->vt->threaded) {
        pthread_mutex_lock(&c->mu);
        inline_ok = !c->head && !c->busy;
        pthread_mutex_unlock(&c->mu);
    }
    if (!inline_ok) {
        ds_comm_handle *h = dispatch(c, &proto, err);
        return h ? wait_untimed(h, err) : -1;
    }
    ds_progress_enter(op_name(proto.kind), proto.count, ds_dtype_name(proto.dtype));
    int rc = run_op(&proto);
    if (rc == 0 && proto.ran && c->vt->finish) {
        rc = c->vt->finish(c->be, &proto, &proto.err);
        if (rc == 0 && proto.op == DS_COMM_AVG) finish_avg(&proto);
    }
    ds_progress_leave();
    pthread_mutex_lock(&c->mu);
    settle(&proto, rc);
    pthread_mutex_unlock(&c->mu);
    if (rc != 0 && err) *err = proto.err;
    return rc;
}

int ds_comm_done(ds_comm_handle *h) {
    ds_comm *c = h->comm;
    if (!c->vt->threaded) return h->done || !c->vt->poll ? 1 : c->vt->poll(c->be, h);
    pthread_mutex_lock(&c->mu);
    int done = h->done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

int ds_comm_wait(ds_comm_handle *h, ds_err *err) {
    double t0 = ds_now_s();
    int rc = wait_untimed(h, err);
    count_wait(t0);
    return rc;
}

static int wait_untimed(ds_comm_handle *h, ds_err *err) {
    if (!h) return ds_err_set(err, "comm: wait on a NULL handle");
    ds_comm *c = h->comm;
    int rc;
    ds_progress_enter(op_name(h->kind), h->count, ds_dtype_name(h->dtype)); /* hang reports name it */
    if (c->vt->threaded) {
        pthread_mutex_lock(&c->mu);
        while (!h->done) pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        rc = h->rc;
    } else if (!h->done) {
        rc = c->vt->order ? c->vt->order(c->be, h, &h->err) : c->vt->finish(c->be, h, &h->err);
        if (rc == 0 && h->op == DS_COMM_AVG) finish_avg(h);
        pthread_mutex_lock(&c->mu);
        settle(h, rc);
        pthread_mutex_unlock(&c->mu);
    } else {
        rc = h->rc;
    }
    ds_progress_leave();
    if (rc != 0 && err) *err = h->err; /* NULL: the caller (a finalizer) only waits */
    free(h);
    return rc;
}

/* ---- the ops ---- */

ds_comm_handle *ds_comm_iallreduce(ds_comm *c, void *buf, size_t count, ds_dtype dt,
                                   ds_comm_reduce op, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_ALLREDUCE, .in = buf, .out = buf, .count = count,
                        .dtype = dt, .op = op};
    return issue(c, p, err);
}

ds_comm_handle *ds_comm_ireduce_scatter(ds_comm *c, void *in, void *out, size_t count,
                                        ds_dtype dt, ds_comm_reduce op, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_REDUCE_SCATTER, .in = in, .out = out,
                        .count = count, .dtype = dt, .op = op};
    return issue(c, p, err);
}

ds_comm_handle *ds_comm_iallgather(ds_comm *c, const void *in, void *out, size_t count,
                                   ds_dtype dt, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_ALLGATHER, .in = (void *)in, .out = out,
                        .count = count, .dtype = dt};
    return issue(c, p, err);
}

ds_comm_handle *ds_comm_ibroadcast(ds_comm *c, void *buf, size_t count, ds_dtype dt,
                                   int root, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_BROADCAST, .in = buf, .out = buf, .count = count,
                        .dtype = dt, .root = root};
    return issue(c, p, err);
}

ds_comm_handle *ds_comm_ibarrier(ds_comm *c, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_BARRIER, .dtype = DS_F32};
    return issue(c, p, err);
}

int ds_comm_allreduce(ds_comm *c, void *buf, size_t count, ds_dtype dt, ds_comm_reduce op,
                      ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_ALLREDUCE, .in = buf, .out = buf, .count = count,
                        .dtype = dt, .op = op};
    return run_sync(c, p, err);
}

int ds_comm_reduce_scatter(ds_comm *c, void *in, void *out, size_t count, ds_dtype dt,
                           ds_comm_reduce op, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_REDUCE_SCATTER, .in = in, .out = out,
                        .count = count, .dtype = dt, .op = op};
    return run_sync(c, p, err);
}

int ds_comm_allgather(ds_comm *c, const void *in, void *out, size_t count, ds_dtype dt,
                      ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_ALLGATHER, .in = (void *)in, .out = out,
                        .count = count, .dtype = dt};
    return run_sync(c, p, err);
}

int ds_comm_broadcast(ds_comm *c, void *buf, size_t count, ds_dtype dt, int root,
                      ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_BROADCAST, .in = buf, .out = buf, .count = count,
                        .dtype = dt, .root = root};
    return run_sync(c, p, err);
}

int ds_comm_barrier(ds_comm *c, ds_err *err) {
    ds_comm_handle p = {.kind = DS_COMM_OP_BARRIER, .dtype = DS_F32};
    return run_sync(c, p, err);
}
