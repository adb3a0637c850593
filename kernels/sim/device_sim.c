/* The simulated GPU (device.h's "sim"): memory the host cannot dereference, work run on
 * stream threads in stream order, the CPU kernels as its kernels. It exists so that the
 * device path (explicit copies, stream order, events, stream-ordered frees) is proved on
 * machines without a GPU: an engine that forgets a copy faults, one that forgets a wait
 * or a sync reads a wrong value, and DS_SIM_DELAY makes the latter likely rather than
 * possible. Same kernels in the same order as cpu: the same bits.
 *
 * The memory is a sub-allocator (device_pool.h) over one region (sim_region.c). A free
 * retires the block at once and queues its reclaim on the compute stream, so the block
 * is handed out again only after the work queued before the free has run; the reclaim
 * fills the freed bytes with 0xff (NaN as floats) where they hold data, so work that
 * reads a buffer after its free (on another stream, unordered) sees NaNs or zeros
 * instead of plausible old values.
 * Allocations are zeroed on the compute stream, in order with kernels; those asked for
 * not zeroed (alloc_uninit) are filled with 0xff there instead. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define SIM_ALIGN 256          /* as cudaMalloc */
#define SIM_MAX_DELAY_US 10000000u

static sim_dev *g_sim; /* the open sim device (one per process: the kernel table's) */

sim_dev *sim_current(void) { return g_sim; }

static sim_dev *dev_of(ds_device *d) { return d->impl; }
static sim_stream *stream_of(sim_dev *g, ds_stream *s) { return s ? (sim_stream *)s : g->compute; }

static const char *human(char buf[32], size_t bytes) {
    static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, 32, "%zu bytes", bytes);
    else snprintf(buf, 32, "%.2f %s", v, unit[u]);
    return buf;
}

/* ---- work items ------------------------------------------------------------------- */

typedef struct copy_work {
    sim_work w;
    void *dst;
    const void *src; /* NULL: fill the range with byte instead */
    size_t bytes;
    int byte;
} copy_work;

static int run_copy(sim_work *w, sim_stream *s, ds_err *err) {
    (void)s, (void)err;
    copy_work *c = (copy_work *)w;
    if (c->src) memmove(c->dst, c->src, c->bytes);
    else memset(c->dst, c->byte, c->bytes);
    return 0;
}

/* Queues a copy (src NULL: a fill with byte) on s; its sequence number, 0 when no host
 * memory. */
static uint64_t queue_copy(sim_stream *s, void *dst, const void *src, size_t bytes, int byte) {
    copy_work *c = calloc(1, sizeof *c);
    if (!c) return sim_fail(s->dev, "out of host memory to queue a copy"), 0;
    c->w.run = run_copy;
    c->dst = dst;
    c->src = src;
    c->bytes = bytes;
    c->byte = byte;
    return sim_enqueue(s, &c->w);
}

typedef struct reclaim_work {
    sim_work w;
    size_t off, asked, span;
} reclaim_work;

static int run_reclaim(sim_work *w, sim_stream *s, ds_err *err) {
    reclaim_work *r = (reclaim_work *)w;
    sim_dev *g = s->dev;
    sim_fill_freed(g, r->off, r->asked);
    pthread_mutex_lock(&g->lock);
    sim_asan_freed(g, r->off, r->span);
    int rc = ds_pool_reclaim(g->pool, r->off);
    pthread_mutex_unlock(&g->lock);
    if (rc != 0)
        return ds_err_set(err, "free: the block at +%zu was not waiting to be reclaimed", r->off);
    return 0;
}

typedef struct host_work {
    sim_work w;
    int (*fn)(void *arg, ds_err *err);
    void *arg;
} host_work;

static int run_host(sim_work *w, sim_stream *s, ds_err *err) {
    (void)s;
    host_work *h = (host_work *)w;
    if (h->fn(h->arg, err) == 0) return 0;
    if (!err->msg[0]) ds_err_set(err, "a host function launched on a stream failed");
    return -1;
}

/* ---- memory ----------------------------------------------------------------------- */

static void *oom(sim_dev *g, size_t bytes, ds_err *err) {
    ds_pool_stats st;
    pthread_mutex_lock(&g->lock);
    ds_pool_stats_get(g->pool, &st);
    pthread_mutex_unlock(&g->lock);
    char a[32], f[32], t[32], l[32];
    ds_err_set(err, "device sim: out of memory: %s asked (%zu bytes), %s free of %s, the "
               "largest free block %s (%zu bytes); DS_SIM_MEMORY sets the device's size",
               human(a, bytes), bytes, human(f, st.free), human(t, st.size),
               human(l, st.largest_free), st.largest_free);
    return NULL;
}

/* A block of bytes from the pool, waiting once for queued frees when there is none; its
 * offset, or SIZE_MAX with err. *fresh: the bytes at its end never handed out before
 * (still the memfd's zeros). */
static size_t pool_take(sim_dev *g, size_t bytes, size_t *fresh, ds_err *err) {
    size_t off, span;
    for (int waited = 0;; waited = 1) {
        pthread_mutex_lock(&g->lock);
        if (ds_pool_alloc(g->pool, bytes, &off, &span) == 0) break;
        ds_pool_stats st;
        ds_pool_stats_get(g->pool, &st);
        pthread_mutex_unlock(&g->lock);
        /* frees still queued on the compute stream may make room: wait for them once
         * (not from work running on a stream, which could be waiting for itself) */
        if (waited || !st.retired || sim_stream_self()) return oom(g, bytes, err), SIZE_MAX;
        sim_wait_seq(g->compute, sim_queued(g->compute));
    }
    size_t used = off + bytes < g->touched ? bytes : g->touched > off ? g->touched - off : 0;
    *fresh = bytes - used;
    if (off + span > g->touched) g->touched = off + span;
    sim_asan_allocated(g, off, bytes, span);
    pthread_mutex_unlock(&g->lock);
    return off;
}

static void *sim_alloc(ds_device *d, size_t bytes, ds_err *err) {
    sim_dev *g = dev_of(d);
    size_t fresh, off = pool_take(g, bytes, &fresh, err);
    if (off == SIZE_MAX) return NULL;
    /* pages never handed out are still the memfd's zeros */
    if (bytes > fresh) queue_copy(g->compute, g->alias + off, NULL, bytes - fresh, 0);
    return g->view + off;
}

/* Every byte 0xff, fresh pages too: NaN in every float format, so a kernel that reads
 * the buffer before writing it gives NaNs, never the zeros or old values a GPU may hold
 * by chance. */
static void *sim_alloc_uninit(ds_device *d, size_t bytes, ds_err *err) {
    sim_dev *g = dev_of(d);
    size_t fresh, off = pool_take(g, bytes, &fresh, err);
    if (off == SIZE_MAX) return NULL;
    if (bytes) queue_copy(g->compute, g->alias + off, NULL, bytes, 0xff);
    return g->view + off;
}

static void sim_free(ds_device *d, void *p, size_t bytes) {
    sim_dev *g = dev_of(d);
    if (!p) return;
    if (!sim_in_region(g, p)) {
        sim_fail(g, "free(%p, %zu bytes): not device memory", p, bytes);
        return;
    }
    size_t off = (size_t)((char *)p - g->view), asked = 0;
    ds_pool_block b = {0};
    pthread_mutex_lock(&g->lock);
    int rc = ds_pool_retire(g->pool, off, &asked);
    ds_pool_find(g->pool, off, &b);
    pthread_mutex_unlock(&g->lock);
    if (rc != 0) {
        sim_fail(g, "free(%p, %zu bytes): not the start of an allocation (freed twice, or "
                 "a pointer into one)", p, bytes);
        return;
    }
    if (asked != bytes)
        sim_fail(g, "free(%p, %zu bytes): the allocation asked for %zu bytes", p, bytes, asked);
    reclaim_work *r = calloc(1, sizeof *r);
    if (!r) { /* the block stays retired: lost, never reused while in use */
        sim_fail(g, "free(%p): out of host memory to queue the free", p);
        return;
    }
    r->w.run = run_reclaim;
    r->w.always = 1;
    r->off = off;
    r->asked = asked;
    r->span = b.size;
    sim_enqueue(g->compute, &r->w);
}

/* The alias of a device range an operation names, or NULL after queuing its error. */
static void *device_range(sim_dev *g, const char *op, const char *what, const void *p,
                          size_t bytes) {
    char why[256], msg[512];
    void *a = sim_translate(g, p, bytes, why, sizeof why);
    if (a) return a;
    snprintf(msg, sizeof msg, "%s: %s %s", op, what, why);
    sim_enqueue_error(g->compute, msg);
    return NULL;
}

static void sim_memset0(ds_device *d, void *p, size_t bytes) {
    sim_dev *g = dev_of(d);
    if (!bytes) return;
    void *a = device_range(g, "memset0", "buffer", p, bytes);
    if (a) queue_copy(g->compute, a, NULL, bytes, 0);
}

static void sim_copy(ds_device *d, void *dst, const void *src, size_t bytes) {
    sim_dev *g = dev_of(d);
    if (!bytes) return;
    void *a = device_range(g, "copy", "destination", dst, bytes);
    void *b = a ? device_range(g, "copy", "source", src, bytes) : NULL;
    if (a && b) queue_copy(g->compute, a, b, bytes, 0);
}

/* ---- host <-> device -------------------------------------------------------------- */

static int refuse_on_stream(const char *op, ds_err *err) {
    if (!sim_stream_self()) return 0;
    return ds_err_set(err, "device sim: %s called from work running on a stream: it would "
                           "wait for the streams from one of them", op);
}

static int overlaps_region(const sim_dev *g, const void *p, size_t bytes) {
    const char *a = p, *lo = g->view, *hi = g->view + g->size;
    return bytes && a < hi && a + bytes > lo;
}

/* Copies between host memory and the device range dev on the compute stream, after the
 * work queued there, and waits for it. */
static int transfer(sim_dev *g, const char *op, void *host, const void *dev, size_t bytes,
                    int to_host, ds_err *err) {
    if (refuse_on_stream(op, err)) return -1;
    char why[256];
    uint64_t seq;
    if (bytes) {
        void *a = sim_translate(g, dev, bytes, why, sizeof why);
        if (!a)
            return ds_err_set(err, "device sim: %s: %s %s", op, to_host ? "source" : "destination",
                              why);
        if (!host)
            return ds_err_set(err, "device sim: %s: the %s is NULL", op,
                              to_host ? "destination" : "source");
        if (overlaps_region(g, host, bytes))
            return ds_err_set(err, "device sim: %s: the %s %p is device memory (copy between "
                                   "device buffers with copy)", op,
                              to_host ? "destination" : "source", host);
        seq = to_host ? queue_copy(g->compute, host, a, bytes, 0)
                      : queue_copy(g->compute, a, host, bytes, 0);
    } else {
        seq = sim_queued(g->compute);
    }
    sim_wait_seq(g->compute, seq);
    return sim_check_failed(g, err);
}

static int sim_to_host(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err) {
    return transfer(dev_of(d), "to_host", dst, src, bytes, 1, err);
}

static int sim_from_host(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err) {
    return transfer(dev_of(d), "from_host", (void *)src, dst, bytes, 0, err);
}

static int sim_sync(ds_device *d, ds_err *err) {
    sim_dev *g = dev_of(d);
    if (refuse_on_stream("sync", err)) return -1;
    sim_wait_all(g);
    return sim_check_failed(g, err);
}

/* ---- streams and events ----------------------------------------------------------- */

static ds_stream *sim_stream_new(ds_device *d, ds_err *err) {
    return (ds_stream *)sim_stream_start(dev_of(d), err);
}

static void sim_stream_free(ds_device *d, ds_stream *s) {
    sim_dev *g = dev_of(d);
    if (s && (sim_stream *)s != g->compute) sim_stream_stop((sim_stream *)s);
}

static ds_event *sim_event_new(ds_device *d, ds_err *err) {
    (void)d;
    sim_event *e = calloc(1, sizeof *e);
    if (!e) ds_err_set(err, "device sim: out of host memory for an event");
    return (ds_event *)e;
}

static void sim_event_free(ds_device *d, ds_event *e) {
    (void)d;
    free(e);
}

static void sim_record(ds_device *d, ds_event *e, ds_stream *s) {
    sim_event_record((sim_event *)e, stream_of(dev_of(d), s));
}

static void sim_stream_wait(ds_device *d, ds_stream *s, ds_event *e) {
    sim_stream_wait_event(stream_of(dev_of(d), s), (sim_event *)e);
}

static int sim_event_sync(ds_device *d, ds_event *e, ds_err *err) {
    if (refuse_on_stream("event_sync", err)) return -1;
    sim_event_wait((sim_event *)e);
    return sim_check_failed(dev_of(d), err);
}

static int sim_event_done(ds_device *d, ds_event *e) {
    (void)d;
    return sim_event_reached((sim_event *)e);
}

static int sim_launch_host(ds_device *d, ds_stream *s, int (*fn)(void *, ds_err *), void *arg,
                           ds_err *err) {
    sim_dev *g = dev_of(d);
    if (!fn) return ds_err_set(err, "device sim: launch_host without a function");
    host_work *h = calloc(1, sizeof *h);
    if (!h) return ds_err_set(err, "device sim: out of host memory to queue a host function");
    h->w.run = run_host;
    h->fn = fn;
    h->arg = arg;
    sim_enqueue(stream_of(g, s), &h->w);
    return 0;
}

static void *sim_alias(ds_device *d, const void *p) {
    sim_dev *g = dev_of(d);
    if (!p || !sim_in_region(g, p)) return (void *)p;
    return g->alias + ((const char *)p - g->view);
}

static void sim_mem_info(ds_device *d, ds_device_mem *out) {
    sim_dev *g = dev_of(d);
    ds_pool_stats st;
    pthread_mutex_lock(&g->lock);
    ds_pool_stats_get(g->pool, &st);
    pthread_mutex_unlock(&g->lock);
    out->total = st.size;
    out->free = st.free;
    out->in_use = st.in_use;
    /* what the allocator holds: the range up to its highest block in use or waiting on a
     * queued free (a caching allocator's segments); never less than in use */
    out->reserved = st.extent > st.in_use ? st.extent : st.in_use;
}

static void sim_close(ds_device *d) {
    sim_dev *g = dev_of(d);
    if (g->compute) sim_wait_all(g);
    sim_streams_free(g);
    sim_asan_forget(g);
    sim_region_unmap(g);
    ds_pool_destroy(g->pool);
    pthread_mutex_destroy(&g->lock);
    if (g_sim == g) g_sim = NULL;
    free(g);
}

static const ds_device_ops SIM_OPS = {
    .alloc = sim_alloc,
    .alloc_uninit = sim_alloc_uninit,
    .free = sim_free,
    .memset0 = sim_memset0,
    .copy = sim_copy,
    .to_host = sim_to_host,
    .from_host = sim_from_host,
    .sync = sim_sync,
    .stream_new = sim_stream_new,
    .stream_free = sim_stream_free,
    .event_new = sim_event_new,
    .event_free = sim_event_free,
    .event_record = sim_record,
    .stream_wait = sim_stream_wait,
    .event_sync = sim_event_sync,
    .event_done = sim_event_done,
    .launch_host = sim_launch_host,
    .alias = sim_alias,
    .mem_info = sim_mem_info,
    .close = sim_close,
};

/* DS_SIM_DELAY (microseconds, at most 10 s) and DS_SIM_SEED. */
static int read_debug_env(sim_dev *g, ds_err *err) {
    const char *s = getenv("DS_SIM_DELAY");
    char *end;
    if (s && *s) {
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (*end || errno || *s == '-' || v > SIM_MAX_DELAY_US)
            return ds_err_set(err, "DS_SIM_DELAY='%s': expected the longest random delay before "
                                   "each stream operation in microseconds (0 to %u)", s,
                              SIM_MAX_DELAY_US);
        g->delay_us = (unsigned)v;
    }
    g->seed = 1;
    s = getenv("DS_SIM_SEED");
    if (s && *s) {
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end || errno || *s == '-')
            return ds_err_set(err, "DS_SIM_SEED='%s': expected an unsigned integer", s);
        g->seed = v;
    }
    return 0;
}

ds_device *ds_device_sim_open(ds_err *err) {
    if (g_sim) return ds_err_set(err, "device sim: already open in this process"), NULL;
    sim_dev *g = calloc(1, sizeof *g);
    if (!g) return ds_err_set(err, "device sim: out of host memory"), NULL;
    g->fd = -1;
    pthread_mutex_init(&g->lock, NULL);
    if (sim_memory_size(&g->size, err) != 0 || read_debug_env(g, err) != 0 ||
        sim_region_map(g, err) != 0)
        goto fail;
    g->pool = ds_pool_new(g->size, SIM_ALIGN, g->redzone);
    if (!g->pool) {
        ds_err_set(err, "device sim: out of host memory");
        goto fail;
    }
    g->compute = sim_stream_start(g, err);
    if (!g->compute) goto fail;
    g->dev = (ds_device){DS_DEV_SIM, "sim", 0, &SIM_OPS, &ds_sim_kernels, g};
    g_sim = g;
    return &g->dev;
fail:
    ds_pool_destroy(g->pool);
    sim_region_unmap(g);
    pthread_mutex_destroy(&g->lock);
    free(g);
    return NULL;
}
