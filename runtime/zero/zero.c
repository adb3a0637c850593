#include "zero.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"

/* A stage's working copy and gradients are in its precision (fp32, bf16 or fp16); every
 * buffer below that mirrors them (shards, windows, buckets) has that element size, while
 * master weights and optimizer state are fp32. */
static float *fdata(const ds_tensor *t) { return t ? (float *)t->data : NULL; }
static size_t esize(const ds_zero_stage *zs) { return ds_dtype_size(zs->s->opts.precision); }
static int is_half(const ds_zero_stage *zs) { return ds_stage_is_half(zs->s); }
static ds_half half(const ds_zero_stage *zs) { return ds_half_of(zs->s->opts.precision); }
/* Element i of a buffer, or NULL where the buffer holds no storage now. */
static char *at(const ds_tensor *t, int64_t i) { return t && t->data ? ds_tensor_at(t, (size_t)i) : NULL; }

/* Averaging 16-bit gradients: each rank's are divided by the world size first and then
 * summed. Summing first (then dividing) overflows fp16 whenever the ranks' sum passes
 * 65504 even though the average would not, skipping steps a single rank would take;
 * divided first, no partial sum exceeds the largest input. Dividing by a power of two is
 * exact (short of fp16's subnormal range); other world sizes round once more. */
static ds_comm_reduce prescale(ds_zero *z, ds_zero_stage *zs, void *buf, size_t n) {
    if (!is_half(zs)) return DS_COMM_AVG;
    if (z->world > 1) DS_K->half_scale(half(zs), buf, 1.0f / (float)z->world, n);
    return DS_COMM_SUM;
}

/* Device-to-device copy on the rank's device, in stream order. */
static void dcopy(void *dst, const void *src, size_t bytes) {
    ds_device *d = ds_device_get();
    d->ops->copy(d, dst, src, bytes);
}

/* Grows an owning 1-D buffer to n elements keeping its values (padding: zero). */
static int resize_keep(ds_tensor *t, int64_t n, ds_err *err) {
    if (t->numel == n && t->data) return 0;
    size_t es = ds_dtype_size(t->dtype);
    void *p = ds_alloc((size_t)n * es, t->cat, err);
    if (!p) return ds_err_prefix(err, "%lld elements", (long long)n);
    if (t->data) dcopy(p, t->data, (size_t)(t->numel < n ? t->numel : n) * es);
    if (t->owns) ds_free(t->data, ds_tensor_nbytes(t), t->cat);
    t->data = p;
    t->numel = n;
    t->ndim = 1;
    t->shape[0] = n;
    t->owns = 1;
    return 0;
}

static ds_tensor *new_vec(ds_dtype dt, int64_t n, ds_mem_cat cat, ds_err *err) {
    int64_t len = n > 0 ? n : 1;
    return ds_tensor_new(dt, cat, 1, &len, err);
}

static int index_of(const ds_zero *z, const ds_stage *s) {
    for (int i = 0; i < z->n; i++)
        if (z->st[i].s == s) return i;
    return -1;
}

static int add_dep(ds_zero_stage *zs, int k, ds_err *err) {
    for (int i = 0; i < zs->ndeps; i++)
        if (zs->deps[i] == k) return 0;
    int *d = realloc(zs->deps, (size_t)(zs->ndeps + 1) * sizeof *d);
    if (!d) return ds_err_set(err, "zero: out of memory");
    zs->deps = d;
    zs->deps[zs->ndeps++] = k;
    return 0;
}

/* Tied parameters used by the layers under l make their owner stages dependencies. */
static int collect_deps(ds_zero *z, ds_zero_stage *zs, const ds_layer *l, ds_err *err) {
    for (int i = 0; i < l->nparam; i++) {
        if (!l->tied[i]) continue;
        int k = index_of(z, l->param[i]->owner);
        if (k < 0)
            return ds_err_set(err, "stage '%s': parameter '%s' is tied to a stage outside "
                                   "this model", zs->s->name, l->param[i]->name);
        if (add_dep(zs, k, err) != 0) return -1;
    }
    for (int i = 0; i < l->nchild; i++)
        if (collect_deps(z, zs, l->child[i], err) != 0) return -1;
    return 0;
}

static int setup_stage(ds_zero *z, int k, ds_err *err) {
    ds_zero_stage *zs = &z->st[k];
    ds_stage *s = zs->s;
    zs->zero = s->opts.zero;
    zs->shards_optim = zs->zero >= 1;
    zs->shards_grads = zs->zero >= 2;
    zs->shards_params = zs->zero >= 3;
    if (ds_partition_make((int64_t)s->numel, z->world, &zs->part, err) != 0) return -1;
    zs->lo = ds_partition_begin(&zs->part, z->rank);
    zs->hi = zs->lo + ds_partition_real(&zs->part, z->rank);
    if (add_dep(zs, k, err) != 0 || collect_deps(z, zs, s->root, err) != 0) return -1;
    int64_t padded = zs->part.padded, shard = zs->part.shard;
    /* A sharded optimizer all-gathers the full parameters from the shards, and one with
     * full gradients reduce-scatters them in place: those buffers need the padded
     * length; unsharded, the real length is all-reduced. */
    if (zs->shards_optim && !zs->shards_params && resize_keep(s->flat_params, padded, err) != 0)
        return -1;
    if (!zs->shards_grads) {
        if (zs->shards_optim && resize_keep(s->flat_grads, padded, err) != 0) return -1;
        ds_tensor_zero(s->flat_grads);
    } else {
        if (!(zs->grad_shard = new_vec(s->opts.precision, shard, DS_MEM_GRADS, err))) return -1;
        ds_tensor_release(s->flat_grads);
    }
    if (zs->shards_params) {
        if (!(zs->param_shard = new_vec(s->opts.precision, shard, DS_MEM_PARAMS, err))) return -1;
        dcopy(zs->param_shard->data, at(s->flat_params, zs->lo), (size_t)(zs->hi - zs->lo) * esize(zs));
        ds_tensor_release(s->flat_params);
    }
    /* A stage the script stepped before ZeRO took over keeps no full-size moments. */
    if (zs->shards_optim) {
        ds_tensor_free(s->adam_m);
        ds_tensor_free(s->adam_v);
        ds_tensor_free(s->momentum);
        ds_tensor_free(s->master);
        s->adam_m = s->adam_v = s->momentum = s->master = NULL;
    }
    ds_stage_bind_params(s);
    return 0;
}

ds_zero *ds_zero_new(ds_comm *comm, ds_stage **stages, int n, size_t bucket_elems,
                     ds_err *err) {
    if (!comm || n < 1) return ds_err_set(err, "zero: needs a communicator and stages"), NULL;
    ds_zero *z = calloc(1, sizeof *z);
    if (!z || !(z->st = calloc((size_t)n, sizeof *z->st))) {
        free(z);
        return ds_err_set(err, "zero: out of memory"), NULL;
    }
    z->comm = comm;
    z->rank = ds_comm_rank(comm);
    z->world = ds_comm_size(comm);
    z->n = n;
    z->bucket_elems = bucket_elems ? bucket_elems : DS_ZERO_BUCKET_ELEMS;
    for (int k = 0; k < n; k++) {
        if (stages[k]->described) {
            ds_err_set(err, "zero: stage '%s' is a description for the memory planner",
                       stages[k]->name);
            ds_zero_free(z);
            return NULL;
        }
        z->st[k].s = stages[k];
    }
    /* Every rank starts from rank 0's parameters, as DeepSpeed does: initialisation is
     * seeded, but a script may have changed them on one rank only. */
    for (int k = 0; k < n && z->world > 1; k++) {
        ds_stage *s = stages[k];
        if (ds_comm_broadcast(comm, s->flat_params->data, s->numel, s->opts.precision, 0, err) != 0) {
            ds_err_prefix(err, "zero: broadcast stage '%s' parameters", s->name);
            ds_zero_free(z);
            return NULL;
        }
    }
    for (int k = 0; k < n; k++) {
        if (setup_stage(z, k, err) != 0) {
            ds_err_prefix(err, "zero");
            ds_zero_free(z);
            return NULL;
        }
    }
    return z;
}

void ds_zero_free(ds_zero *z) {
    if (!z) return;
    for (int i = 0; i < z->npending; i++) {
        ds_err e2;
        ds_comm_wait(z->pending[i].h, &e2); /* the buckets must outlive their ops */
    }
    for (int k = 0; k < z->n; k++) {
        ds_zero_stage *zs = &z->st[k];
        if (zs->gather) ds_comm_wait(zs->gather, NULL);
        ds_tensor_free(zs->param_shard);
        ds_tensor_free(zs->grad_shard);
        ds_tensor_free(zs->m);
        ds_tensor_free(zs->v);
        ds_tensor_free(zs->mom);
        ds_tensor_free(zs->master);
        free(zs->deps);
    }
    ds_tensor_free(z->bucket[0]);
    ds_tensor_free(z->bucket[1]);
    free(z->st);
    free(z);
}

/* ---- ZeRO-3 parameter windows ------------------------------------------------------- */

static int start_gather(ds_zero *z, int k, ds_err *err) {
    ds_zero_stage *zs = &z->st[k];
    if (!zs->shards_params || zs->gathered || zs->gather) return 0;
    ds_stage *s = zs->s;
    int64_t padded = zs->part.padded;
    /* not zeroed: the all-gather writes every element (world shards of part.shard) */
    if (ds_tensor_resize_uninit(s->flat_params, 1, &padded, err) != 0) return -1;
    ds_stage_bind_params(s);
    zs->gather = ds_comm_iallgather(z->comm, zs->param_shard->data, s->flat_params->data,
                                    (size_t)zs->part.shard, s->opts.precision, err);
    return zs->gather ? 0 : ds_err_prefix(err, "stage '%s': gather parameters", s->name);
}

static int ensure_gathered(ds_zero *z, int k, ds_err *err) {
    ds_zero_stage *zs = &z->st[k];
    if (!zs->shards_params || zs->gathered) return 0;
    if (start_gather(z, k, err) != 0) return -1;
    ds_comm_handle *h = zs->gather;
    zs->gather = NULL;
    if (ds_comm_wait(h, err) != 0) return ds_err_prefix(err, "stage '%s': gather", zs->s->name);
    zs->gathered = 1;
    return 0;
}

static void release_params(ds_zero *z, int k) {
    ds_zero_stage *zs = &z->st[k];
    if (!zs->shards_params || !zs->gathered) return;
    ds_tensor_release(zs->s->flat_params);
    zs->gathered = 0;
    ds_stage_bind_params(zs->s);
}

static int needs(const ds_zero *z, int k, int dep) {
    if (k < 0 || k >= z->n) return 0;
    for (int i = 0; i < z->st[k].ndeps; i++)
        if (z->st[k].deps[i] == dep) return 1;
    return 0;
}

static int gather_deps(ds_zero *z, int k, ds_err *err) {
    for (int i = 0; i < z->st[k].ndeps; i++)
        if (ensure_gathered(z, z->st[k].deps[i], err) != 0) return -1;
    return 0;
}

static int prefetch_deps(ds_zero *z, int k, ds_err *err) {
    if (k < 0 || k >= z->n || z->no_prefetch) return 0;
    for (int i = 0; i < z->st[k].ndeps; i++)
        if (start_gather(z, z->st[k].deps[i], err) != 0) return -1;
    return 0;
}

/* Frees the parameter windows of k's dependencies that stage `next` does not use. */
static void release_deps(ds_zero *z, int k, int next) {
    for (int i = 0; i < z->st[k].ndeps; i++) {
        int d = z->st[k].deps[i];
        if (!needs(z, next, d)) release_params(z, d);
    }
}

static int check_k(const ds_zero *z, int k, ds_err *err) {
    if (k < 0 || k >= z->n) return ds_err_set(err, "zero: stage index %d (0..%d)", k, z->n - 1);
    return 0;
}

int ds_zero_before_forward(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0 || gather_deps(z, k, err) != 0) return -1;
    return prefetch_deps(z, k + 1, err);
}

int ds_zero_after_forward(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return -1;
    /* The last stage's backward comes next: keep what it uses. */
    release_deps(z, k, k == z->n - 1 ? k : k + 1);
    return 0;
}

/* ---- gradients ---------------------------------------------------------------------- */

static int ensure_grad_window(ds_zero *z, int k, ds_err *err) {
    ds_zero_stage *zs = &z->st[k];
    ds_stage *s = zs->s;
    if (!zs->shards_grads || s->flat_grads->data) return 0;
    int64_t padded = zs->part.padded;
    if (ds_tensor_resize(s->flat_grads, 1, &padded, err) != 0) return -1; /* zeroed */
    ds_stage_bind_params(s);
    return 0;
}

int ds_zero_before_backward(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0 || gather_deps(z, k, err) != 0) return -1;
    for (int i = 0; i < z->st[k].ndeps; i++)
        if (ensure_grad_window(z, z->st[k].deps[i], err) != 0) return -1;
    return prefetch_deps(z, k - 1, err);
}

static int ensure_buckets(ds_zero *z, int64_t elems, ds_err *err) {
    for (int b = 0; b < 2; b++) {
        if (z->bucket[b] && z->bucket[b]->numel >= elems) continue;
        ds_tensor_free(z->bucket[b]);
        /* fp32-sized elements: room for a column of any precision */
        if (!(z->bucket[b] = new_vec(DS_F32, elems, DS_MEM_COMM, err))) return -1;
    }
    return 0;
}

/* Copies column [j0, j0 + cc) of every rank's piece of the window into bucket b, laid
 * out as the reduce-scatter wants (rank r's piece at r * cc), and starts it. */
static ds_comm_handle *start_bucket(ds_zero *z, ds_zero_stage *zs, int b, int64_t j0,
                                    int64_t cc, ds_err *err) {
    size_t es = esize(zs);
    char *buf = z->bucket[b]->data;
    for (int r = 0; r < z->world; r++)
        dcopy(buf + (size_t)(r * cc) * es, at(zs->s->flat_grads, r * zs->part.shard + j0),
              (size_t)cc * es);
    ds_comm_reduce op = prescale(z, zs, buf, (size_t)(cc * z->world));
    return ds_comm_ireduce_scatter(z->comm, buf, buf + (size_t)(z->rank * cc) * es, (size_t)cc,
                                   zs->s->opts.precision, op, err);
}

/* The rank's reduced piece of bucket b (c elements) added into its shard at j. */
static void add_piece(ds_zero *z, ds_zero_stage *zs, int b, int64_t j, int64_t c) {
    char *acc = at(zs->grad_shard, j);
    /* buckets are sized in fp32 and shared by stages of every precision */
    const char *piece = (const char *)z->bucket[b]->data + (size_t)(z->rank * c) * esize(zs);
    if (is_half(zs)) DS_K->half_add(half(zs), (uint16_t *)acc, (uint16_t *)acc, (const uint16_t *)piece, (size_t)c);
    else DS_K->add_forward((float *)acc, (float *)acc, (const float *)piece, (size_t)c);
}

/* Completes the buckets left on the wire by the last reduce_window, in start order. */
static int finish_pending(ds_zero *z, ds_err *err) {
    int rc = 0;
    for (int i = 0; i < z->npending; i++) {
        ds_zero_pending *p = &z->pending[i];
        ds_err e2; /* after the first failure: waited for, not reported */
        int first_failure = rc == 0;
        if (ds_comm_wait(p->h, first_failure ? err : &e2) == 0) {
            if (rc == 0) add_piece(z, &z->st[p->k], p->b, p->j, p->c);
        } else {
            rc = -1;
            if (first_failure)
                ds_err_prefix(err, "stage '%s': reduce gradients", z->st[p->k].s->name);
        }
    }
    z->npending = 0;
    return rc;
}

/* ZeRO-2/3: the stage's gradient window, reduce-scattered in buckets into the rank's
 * shard (+=, so micro-batches accumulate), then freed. Two buckets alternate: the next
 * one is packed while the previous one is on the wire. The last buckets (a window that
 * fits in two buckets: all of it) are left on the wire: the window is freed at once (the
 * buckets hold its data) and the next hook that needs them adds them in. */
static int reduce_window(ds_zero *z, int k, ds_err *err) {
    ds_zero_stage *zs = &z->st[k];
    int64_t shard = zs->part.shard;
    int64_t col = (int64_t)z->bucket_elems / z->world;
    if (col < 1) col = 1;
    if (col > shard) col = shard;
    if (finish_pending(z, err) != 0) return -1;
    if (shard == 0) goto done;
    if (ensure_buckets(z, col * z->world, err) != 0) return -1;
    ds_comm_handle *h[2] = {NULL, NULL};
    int64_t j[2] = {0, 0}, c[2] = {0, 0};
    int b = 0, rc = 0;
    for (int64_t j0 = 0; j0 < shard && rc == 0; j0 += col, b ^= 1) {
        int64_t cc = shard - j0 < col ? shard - j0 : col;
        if (h[b]) { /* this bucket's previous use must be done before it is repacked */
            rc = ds_comm_wait(h[b], err);
            h[b] = NULL;
            if (rc == 0) add_piece(z, zs, b, j[b], c[b]);
            if (rc != 0) break;
        }
        j[b] = j0;
        c[b] = cc;
        if (!(h[b] = start_bucket(z, zs, b, j0, cc, err))) rc = -1;
    }
    for (int i = 0; i < 2; i++) {
        int bi = b ^ i; /* oldest first: the order they were started */
        if (!h[bi]) continue;
        if (rc == 0) {
            z->pending[z->npending++] = (ds_zero_pending){h[bi], k, bi, j[bi], c[bi]};
        } else {
            ds_err e2;
            ds_comm_wait(h[bi], &e2);
        }
        h[bi] = NULL;
    }
    if (rc != 0) return ds_err_prefix(err, "stage '%s': reduce gradients", zs->s->name);
done:
    ds_tensor_release(zs->s->flat_grads);
    ds_stage_bind_params(zs->s);
    return 0;
}

int ds_zero_after_backward(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return -1;
    ds_zero_stage *zs = &z->st[k];
    if (zs->shards_grads) {
        /* The window is made by before_backward and freed here: a second after_backward
         * (a script calling the hooks itself) has nothing to reduce. */
        if (zs->part.padded > 0 && !zs->s->flat_grads->data)
            return ds_err_set(err, "stage '%s': after_backward without a gradient window (no "
                                   "before_backward since the last after_backward)", zs->s->name);
        if (reduce_window(z, k, err) != 0) return -1;
    }
    release_deps(z, k, k - 1);
    return 0;
}

int ds_zero_zero_grad(ds_zero *z, ds_err *err) {
    if (finish_pending(z, err) != 0) return -1; /* it would land after the zeroing */
    for (int k = 0; k < z->n; k++) {
        ds_zero_stage *zs = &z->st[k];
        ds_tensor_zero(zs->shards_grads ? zs->grad_shard : zs->s->flat_grads);
        if (zs->shards_grads) ds_tensor_zero(zs->s->flat_grads); /* a window left by a failed step */
    }
    return 0;
}

static int wait_all(ds_comm_handle **h, int n, ds_err *err) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (!h[i]) continue;
        ds_err e2;
        if (ds_comm_wait(h[i], rc == 0 ? err : &e2) != 0) rc = -1;
    }
    return rc;
}

int ds_zero_reduce(ds_zero *z, ds_err *err) {
    if (finish_pending(z, err) != 0) return -1;
    ds_comm_handle **h = calloc((size_t)z->n, sizeof *h);
    if (!h) return ds_err_set(err, "zero: out of memory");
    int rc = 0;
    for (int k = 0; k < z->n && rc == 0; k++) {
        ds_zero_stage *zs = &z->st[k];
        ds_tensor *g = zs->s->flat_grads;
        ds_dtype dt = zs->s->opts.precision;
        if (zs->shards_grads) continue; /* reduced in backward, bucket by bucket */
        if (!zs->shards_optim) {
            ds_comm_reduce op = prescale(z, zs, g->data, zs->s->numel);
            h[k] = ds_comm_iallreduce(z->comm, g->data, zs->s->numel, dt, op, err);
        } else {
            ds_comm_reduce op = prescale(z, zs, g->data, (size_t)zs->part.padded);
            h[k] = ds_comm_ireduce_scatter(z->comm, g->data, at(g, zs->lo),
                                           (size_t)zs->part.shard, dt, op, err);
        }
        if (!h[k]) rc = -1;
    }
    if (wait_all(h, z->n, rc == 0 ? err : NULL) != 0) rc = -1;
    free(h);
    return rc == 0 ? 0 : ds_err_prefix(err, "zero: reduce gradients");
}

/* The rank's reduced gradients of stage k: [lo, hi) of the flat buffer. */
static void *shard_grads(ds_zero_stage *zs) {
    return zs->shards_grads ? zs->grad_shard->data : at(zs->s->flat_grads, zs->lo);
}

/* Every rank's n doubles (mine: on the device, at the start of the device's scalars),
 * gathered and summed per column in rank order on the host into out. */
static int sum_over_ranks(ds_zero *z, double *mine, int n, double *out, ds_err *err) {
    double *all = mine + n, *host = calloc((size_t)n * (size_t)z->world, sizeof *host);
    if (!host) return ds_err_set(err, "zero: out of memory");
    /* Raw payload: an all-gather moves bytes, two fp32 words per double. */
    int rc = ds_comm_allgather(z->comm, mine, all, (size_t)n * 2, DS_F32, err);
    if (rc == 0) rc = ds_scalars_read(all, (size_t)n * (size_t)z->world, host, err);
    if (rc == 0)
        for (int i = 0; i < n; i++) {
            double s = 0;
            for (int r = 0; r < z->world; r++) s += host[(size_t)r * (size_t)n + (size_t)i];
            out[i] = s;
        }
    free(host);
    return rc;
}

/* Room for n of this rank's doubles and every rank's, on the device. */
static double *scalars(ds_zero *z, int n, ds_err *err) {
    return ds_device_scalars((size_t)n * (size_t)(z->world + 1), err);
}

int ds_zero_grad_sumsq(ds_zero *z, double *out, ds_err *err) {
    if (finish_pending(z, err) != 0) return -1;
    double *mine = scalars(z, z->n, err);
    double *sum = calloc((size_t)z->n, sizeof *sum);
    if (!mine || !sum) {
        free(sum);
        return mine ? ds_err_set(err, "zero: out of memory") : -1;
    }
    for (int k = 0; k < z->n; k++) {
        ds_zero_stage *zs = &z->st[k];
        ds_sumsq_of(zs->s->opts.precision, shard_grads(zs), (size_t)(zs->hi - zs->lo), &mine[k]);
    }
    int rc = sum_over_ranks(z, mine, z->n, sum, err);
    double total = 0;
    for (int k = 0; k < z->n; k++) total += sum[k]; /* stage order, as one rank sums */
    free(sum);
    *out = total;
    return rc == 0 ? 0 : ds_err_prefix(err, "zero: gradient norm");
}

int ds_zero_scale_grads(ds_zero *z, float k, ds_err *err) {
    if (finish_pending(z, err) != 0) return -1;
    for (int i = 0; i < z->n; i++) {
        ds_zero_stage *zs = &z->st[i];
        if (!zs->shards_optim) ds_stage_scale_grads(zs->s, k);
        else ds_scale_of(zs->s->opts.precision, shard_grads(zs), k, (size_t)(zs->hi - zs->lo));
    }
    return 0;
}

int ds_zero_mean(ds_zero *z, double x, double *out, ds_err *err) {
    double s = 0, *mine = scalars(z, 1, err);
    ds_device *d = ds_device_get();
    if (!mine || d->ops->from_host(d, mine, &x, sizeof x, err) != 0 ||
        sum_over_ranks(z, mine, 1, &s, err) != 0)
        return ds_err_prefix(err, "zero: mean");
    *out = z->world == 1 ? x : s / z->world;
    return 0;
}

/* ---- optimizer ---------------------------------------------------------------------- */

static int ensure_state(ds_tensor **t, int64_t n, ds_err *err) {
    if (*t) return 0;
    return (*t = new_vec(DS_F32, n, DS_MEM_OPTIMIZER, err)) ? 0 : -1;
}

/* The rank's parameters of stage k, indexed like shard_grads. */
static void *shard_params(ds_zero_stage *zs) {
    return zs->shards_params ? zs->param_shard->data : at(zs->s->flat_params, zs->lo);
}

/* 16-bit stages at ZeRO 1..3: the rank's fp32 master shard, made from (refresh: made
 * again from) the rank's slice of the working copy. */
static int sync_master_shard(ds_zero_stage *zs, int refresh, ds_err *err) {
    if (!is_half(zs) || (zs->master && !refresh)) return 0;
    if (ensure_state(&zs->master, zs->part.shard, err) != 0)
        return ds_err_prefix(err, "stage '%s': master weights", zs->s->name);
    DS_K->half_to_f32(half(zs), fdata(zs->master), shard_params(zs), (size_t)(zs->hi - zs->lo));
    return 0;
}

/* All-gathers the updated shards of the stages with a sharded optimizer and full
 * parameters (in place), all started first. */
static int gather_updated(ds_zero *z, ds_err *err) {
    ds_comm_handle **h = calloc((size_t)z->n, sizeof *h);
    if (!h) return ds_err_set(err, "zero: out of memory");
    int rc = 0;
    for (int k = 0; k < z->n && rc == 0; k++) {
        ds_zero_stage *zs = &z->st[k];
        if (!zs->shards_optim || zs->shards_params) continue;
        ds_tensor *w = zs->s->flat_params;
        h[k] = ds_comm_iallgather(z->comm, at(w, zs->lo), w->data, (size_t)zs->part.shard,
                                  zs->s->opts.precision, err);
        if (!h[k]) rc = -1;
    }
    if (wait_all(h, z->n, rc == 0 ? err : NULL) != 0) rc = -1;
    free(h);
    return rc == 0 ? 0 : ds_err_prefix(err, "zero: gather updated parameters");
}

typedef struct step_args {
    const void *cfg;
    float grad_scale;
} step_args;

typedef void (*shard_update_fn)(ds_zero_stage *zs, const ds_param *p, ds_shard_slice sl,
                                const step_args *a);

/* Shard element o of the rank's parameters / gradients / master weights. */
static void *param_at(ds_zero_stage *zs, int64_t o) { return (char *)shard_params(zs) + (size_t)o * esize(zs); }
static void *grad_at(ds_zero_stage *zs, int64_t o) { return (char *)shard_grads(zs) + (size_t)o * esize(zs); }
static float *master_at(ds_zero_stage *zs, int64_t o) { return zs->master ? fdata(zs->master) + o : NULL; }

static void sgd_piece(ds_zero_stage *zs, const ds_param *p, ds_shard_slice sl, const step_args *a) {
    const ds_sgd_cfg *c = a->cfg;
    int64_t o = sl.shard_off;
    ds_sgd_elems(zs->s->opts.precision, param_at(zs, o), grad_at(zs, o), a->grad_scale,
                 master_at(zs, o), fdata(zs->mom) + o, (size_t)sl.len, c,
                 p->decay ? c->weight_decay : 0.0f);
}

/* Before a shard's step: a ZeRO-3 window still open (an evaluation forward keeps the last
 * stage's) would be stale after the update, so it goes; the master shard is made. */
static int begin_shard_update(ds_zero *z, ds_zero_stage *zs, ds_err *err) {
    release_params(z, (int)(zs - z->st));
    return sync_master_shard(zs, 0, err);
}

/* Each parameter's overlap with the rank's shard, with its own decay flag, stepped as one
 * rank steps it (ds_sgd_elems). */
static int update_shard(ds_zero *z, ds_zero_stage *zs, shard_update_fn fn, const step_args *a,
                        ds_err *err) {
    if (begin_shard_update(z, zs, err) != 0) return -1;
    for (int i = 0; i < zs->s->nparams; i++) {
        const ds_param *p = zs->s->params[i];
        ds_shard_slice sl = ds_partition_intersect(&zs->part, z->rank, (int64_t)p->offset,
                                                   (int64_t)p->numel);
        if (sl.len > 0) fn(zs, p, sl, a);
    }
    return 0;
}

/* AdamW on the shard: every parameter's overlap with it a span with its decay, all in one
 * kernel call (ds_adamw_spans_of), as one rank steps its stage. */
static int adamw_shard(ds_zero *z, ds_zero_stage *zs, const step_args *a, ds_err *err) {
    const ds_adamw_cfg *c = a->cfg;
    if (begin_shard_update(z, zs, err) != 0) return -1;
    int np = zs->s->nparams, count = 0;
    ds_decay_span *spans = malloc((size_t)(np ? np : 1) * sizeof *spans);
    if (!spans)
        return ds_err_set(err, "stage '%s': out of host memory for the optimizer", zs->s->name);
    for (int i = 0; i < np; i++) {
        const ds_param *p = zs->s->params[i];
        ds_shard_slice sl = ds_partition_intersect(&zs->part, z->rank, (int64_t)p->offset,
                                                   (int64_t)p->numel);
        if (sl.len > 0)
            ds_decay_spans_add(spans, &count, (size_t)sl.shard_off, (size_t)sl.len,
                               p->decay ? c->weight_decay : 0.0f);
    }
    ds_adamw_spans_of(zs->s->opts.precision, param_at(zs, 0), grad_at(zs, 0), a->grad_scale,
                      master_at(zs, 0), fdata(zs->m), fdata(zs->v), spans, count, c);
    free(spans);
    return 0;
}

int ds_zero_adamw(ds_zero *z, const ds_adamw_cfg *c, float grad_scale, ds_err *err) {
    step_args a = {c, grad_scale};
    if (finish_pending(z, err) != 0) return -1;
    for (int k = 0; k < z->n; k++) {
        ds_zero_stage *zs = &z->st[k];
        if (!zs->shards_optim) { /* the same full step on every rank, as on one rank */
            if (ds_adamw_step_scaled(zs->s, 0, zs->s->numel, c, grad_scale, err) != 0) return -1;
            continue;
        }
        if (ensure_state(&zs->m, zs->part.shard, err) != 0 ||
            ensure_state(&zs->v, zs->part.shard, err) != 0)
            return ds_err_prefix(err, "stage '%s': optimizer state", zs->s->name);
        if (adamw_shard(z, zs, &a, err) != 0) return -1;
    }
    return gather_updated(z, err);
}

int ds_zero_sgd(ds_zero *z, const ds_sgd_cfg *c, float grad_scale, ds_err *err) {
    step_args a = {c, grad_scale};
    if (finish_pending(z, err) != 0) return -1;
    for (int k = 0; k < z->n; k++) {
        ds_zero_stage *zs = &z->st[k];
        if (!zs->shards_optim) {
            if (ds_sgd_step_scaled(zs->s, 0, zs->s->numel, c, grad_scale, err) != 0) return -1;
            continue;
        }
        if (ensure_state(&zs->mom, zs->part.shard, err) != 0)
            return ds_err_prefix(err, "stage '%s': optimizer state", zs->s->name);
        if (update_shard(z, zs, sgd_piece, &a, err) != 0) return -1;
    }
    return gather_updated(z, err);
}

int ds_zero_gather_params(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return -1;
    return ensure_gathered(z, k, err);
}

int ds_zero_store_params(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return -1;
    ds_zero_stage *zs = &z->st[k];
    if (zs->shards_params) {
        if (!zs->gathered)
            return ds_err_set(err, "stage '%s': no gathered parameters to store", zs->s->name);
        dcopy(zs->param_shard->data, at(zs->s->flat_params, zs->lo), (size_t)(zs->hi - zs->lo) * esize(zs));
    }
    /* Masters made before the write would undo it at the next step. */
    if (!zs->shards_optim) return ds_stage_refresh_master(zs->s, err);
    return zs->master ? sync_master_shard(zs, 1, err) : 0;
}

ds_tensor *ds_zero_master(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return NULL;
    ds_zero_stage *zs = &z->st[k];
    if (!is_half(zs)) return ds_err_set(err, "stage '%s' is fp32: no master weights", zs->s->name), NULL;
    if (!zs->shards_optim) return ds_stage_ensure_master(zs->s, err) == 0 ? zs->s->master : NULL;
    release_params(z, k);
    return sync_master_shard(zs, 0, err) == 0 ? zs->master : NULL;
}

int ds_zero_masters_to_params(ds_zero *z, int k, ds_err *err) {
    if (check_k(z, k, err) != 0) return -1;
    ds_zero_stage *zs = &z->st[k];
    if (!is_half(zs)) return 0;
    ds_stage *s = zs->s;
    if (!zs->shards_optim) {
        if (!s->master) return 0;
        DS_K->half_from_f32(half(zs), s->flat_params->data, fdata(s->master), s->numel);
        return 0;
    }
    if (!zs->master) return 0;
    release_params(z, k);
    DS_K->half_from_f32(half(zs), shard_params(zs), fdata(zs->master), (size_t)(zs->hi - zs->lo));
    if (zs->shards_params) return 0;
    ds_tensor *w = s->flat_params;
    if (ds_comm_allgather(z->comm, at(w, zs->lo), w->data, (size_t)zs->part.shard,
                          s->opts.precision, err) != 0)
        return ds_err_prefix(err, "stage '%s': gather loaded parameters", s->name);
    return 0;
}

int ds_zero_barrier(ds_zero *z, ds_err *err) {
    return ds_comm_barrier(z->comm, err) == 0 ? 0 : ds_err_prefix(err, "zero: barrier");
}

void ds_zero_release_params(ds_zero *z, int k) {
    if (k >= 0 && k < z->n) release_params(z, k);
}
