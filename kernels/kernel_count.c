/* Installing the counting table (kernel_count_table.c) and counting the device's memory
 * ops. One count per process, as there is one device: the counters are shared by every
 * thread that calls the device (a communicator's stream thread copies too), hence the
 * lock: a kernel call is far dearer than it. */
#include <pthread.h>
#include <string.h>

#include "kernel_count_impl.h"

/* a slot's counts: its total, and its calls by distinct per-call cost (FLOPs, bytes read,
 * bytes written): what a roofline needs, one time per call, where the totals alone would
 * mix calls on either side of the ridge (a Linear's backward at OC = C and at OC = 4C) */
typedef struct slot {
    ds_kcount total;
    int ncost;
    ds_kcount cost[DS_KCOUNT_COSTS];
} slot;

static struct {
    ds_device *dev; /* the device counted; NULL when none */
    const ds_kernel_table *real;
    const ds_device_ops *real_ops;
    ds_device_ops ops; /* real_ops with the memory ops counted */
    pthread_mutex_t mu;
    slot s[DS_KCOUNT_N];
} g = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void add_to(ds_kcount *c, uint64_t calls, uint64_t flops, uint64_t rd, uint64_t wr) {
    c->calls += calls, c->flops += flops, c->bytes_read += rd, c->bytes_written += wr;
}

void ds_kcount_add(int slot_i, uint64_t flops, uint64_t bytes_read, uint64_t bytes_written) {
    pthread_mutex_lock(&g.mu);
    slot *s = &g.s[slot_i];
    add_to(&s->total, 1, flops, bytes_read, bytes_written);
    int i = 0;
    for (; i < s->ncost && i < DS_KCOUNT_COSTS - 1; i++) {
        ds_kcount *c = &s->cost[i];
        if (c->flops == flops * c->calls && c->bytes_read == bytes_read * c->calls &&
            c->bytes_written == bytes_written * c->calls)
            break;
    }
    if (i == s->ncost) s->ncost++;
    add_to(&s->cost[i], 1, flops, bytes_read, bytes_written);
    pthread_mutex_unlock(&g.mu);
}

const ds_kernel_table *ds_kcount_real(void) { return g.real; }

/* ---- the memory ops that move bytes on the device ------------------------------------- */

/* every device hands out zeroed memory: cuda and sim by a memset on the compute stream */
static void *count_alloc(ds_device *d, size_t bytes, ds_err *err) {
    void *p = g.real_ops->alloc(d, bytes, err);
    if (p) ds_kcount_add(DS_KCOUNT_ALLOC_ZERO, 0, 0, bytes);
    return p;
}

/* moves nothing on a GPU (sim's 0xff fill is a check, not a cost) */
static void *count_alloc_uninit(ds_device *d, size_t bytes, ds_err *err) {
    void *p = g.real_ops->alloc_uninit(d, bytes, err);
    if (p) ds_kcount_add(DS_KCOUNT_ALLOC_UNINIT, 0, 0, 0);
    return p;
}

static void count_memset0(ds_device *d, void *p, size_t bytes) {
    ds_kcount_add(DS_KCOUNT_MEMSET0, 0, 0, bytes);
    g.real_ops->memset0(d, p, bytes);
}

static void count_copy(ds_device *d, void *dst, const void *src, size_t bytes) {
    ds_kcount_add(DS_KCOUNT_COPY, 0, bytes, bytes);
    g.real_ops->copy(d, dst, src, bytes);
}

static int count_to_host(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err) {
    ds_kcount_add(DS_KCOUNT_TO_HOST, 0, bytes, 0);
    return g.real_ops->to_host(d, dst, src, bytes, err);
}

static int count_from_host(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err) {
    ds_kcount_add(DS_KCOUNT_FROM_HOST, 0, 0, bytes);
    return g.real_ops->from_host(d, dst, src, bytes, err);
}

/* ---- install ---------------------------------------------------------------------------- */

int ds_kernel_count_install(ds_device *d, ds_err *err) {
    if (g.dev) return ds_err_set(err, "kernel counts: already counting device %s", g.dev->name);
    ds_kernel_count_reset();
    g.real = d->k;
    g.real_ops = d->ops;
    g.ops = *d->ops;
    g.ops.alloc = count_alloc;
    g.ops.alloc_uninit = count_alloc_uninit;
    g.ops.memset0 = count_memset0;
    g.ops.copy = count_copy;
    g.ops.to_host = count_to_host;
    g.ops.from_host = count_from_host;
    g.dev = d;
    d->ops = &g.ops;
    d->k = &ds_kcount_table;
    return 0;
}

void ds_kernel_count_uninstall(void) {
    if (!g.dev) return;
    g.dev->k = g.real;
    g.dev->ops = g.real_ops;
    g.dev = NULL;
}

int ds_kernel_count_installed(void) { return g.dev != NULL; }

void ds_kernel_count_reset(void) {
    pthread_mutex_lock(&g.mu);
    memset(g.s, 0, sizeof g.s);
    pthread_mutex_unlock(&g.mu);
}

const char *ds_kernel_count_name(int i) {
    static const char *const OPS[] = {"memset0", "alloc_zero", "alloc_uninit", "copy", "to_host",
                                      "from_host"};
    if (i < 0 || i >= DS_KCOUNT_N) return NULL;
    return i < DS_KCOUNT_NKERNELS ? ds_kcount_kernel_names[i] : OPS[i - DS_KCOUNT_NKERNELS];
}

ds_kcount ds_kernel_count_get(int i) {
    ds_kcount c = {0, 0, 0, 0};
    if (i < 0 || i >= DS_KCOUNT_N) return c;
    pthread_mutex_lock(&g.mu);
    c = g.s[i].total;
    pthread_mutex_unlock(&g.mu);
    return c;
}

int ds_kernel_count_costs(int i, ds_kcount out[DS_KCOUNT_COSTS]) {
    if (i < 0 || i >= DS_KCOUNT_N) return 0;
    pthread_mutex_lock(&g.mu);
    int n = g.s[i].ncost;
    memcpy(out, g.s[i].cost, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&g.mu);
    return n;
}

const ds_kernel_table *ds_kernel_count_table(void) { return &ds_kcount_table; }
