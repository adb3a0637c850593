#include "alloc.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "engine_opts.h"

/* Atomic counters: kernels may allocate scratch from OpenMP threads. */
static _Atomic size_t g_current[DS_MEM_NCAT], g_peak[DS_MEM_NCAT];
static _Atomic size_t g_total, g_total_peak;

static const char *const NAMES[DS_MEM_NCAT] = {"params", "grads", "optimizer", "activations",
                                               "comm", "workspace", "data"};

const char *ds_mem_cat_name(ds_mem_cat cat) {
    return (unsigned)cat < DS_MEM_NCAT ? NAMES[cat] : "?";
}

static void raise_peak(_Atomic size_t *peak, size_t now) {
    size_t old = atomic_load(peak);
    while (now > old && !atomic_compare_exchange_weak(peak, &old, now)) {
    }
}

static void count(size_t bytes, ds_mem_cat cat) {
    raise_peak(&g_peak[cat], atomic_fetch_add(&g_current[cat], bytes) + bytes);
    raise_peak(&g_total_peak, atomic_fetch_add(&g_total, bytes) + bytes);
}

static void uncount(size_t bytes, ds_mem_cat cat) {
    atomic_fetch_sub(&g_current[cat], bytes);
    atomic_fetch_sub(&g_total, bytes);
}

/* The limit: SIZE_MAX until read from the job (once), 0 for none. */
static _Atomic size_t g_limit = SIZE_MAX;

void ds_mem_set_limit(size_t bytes) { atomic_store(&g_limit, bytes); }

size_t ds_mem_limit(void) {
    size_t l = atomic_load(&g_limit);
    if (l != SIZE_MAX) return l;
    ds_engine_opts o;
    char why[400];
    /* A bad variable is reported where the options are read (ds.engine_defaults). */
    size_t v = ds_engine_opts_from_env(&o, why, sizeof why) == 0 ? (size_t)o.memory_limit : 0;
    atomic_store(&g_limit, v);
    return v;
}

/* err after a refusal (over the limit, or the device's own words): what was asked, then
 * what this rank holds. */
static void explain(ds_device *d, size_t bytes, ds_mem_cat cat, int over_limit, ds_err *err) {
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err ? err->msg : "");
    char held[600];
    size_t n = 0;
    for (int c = 0; c < DS_MEM_NCAT && n < sizeof held; c++)
        n += (size_t)snprintf(held + n, sizeof held - n, "%s%s %.1f MiB", c ? ", " : "", NAMES[c],
                              (double)atomic_load(&g_current[c]) / (1 << 20));
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    double unused = (double)(m.reserved > m.in_use ? m.reserved - m.in_use : 0) / (1 << 20);
    if (over_limit)
        ds_err_set(err, "%zu bytes of %s asked, %s (%.1f MiB held); this rank holds %s", bytes,
                   NAMES[cat], why, (double)atomic_load(&g_total) / (1 << 20), held);
    else
        ds_err_set(err, "out of %s memory: %zu bytes of %s asked, %.1f MiB free (%s); this rank "
                        "holds %s; reserved but unused %.1f MiB", d->name, bytes, NAMES[cat],
                   (double)m.free / (1 << 20), why[0] ? why : "the device refused", held, unused);
}

/* 0 when bytes more stay within the limit; else -1 with err (in the device's words,
 * for explain() to complete). */
static int within_limit(size_t bytes, ds_err *err) {
    size_t limit = ds_mem_limit();
    if (!limit || atomic_load(&g_total) + bytes <= limit) return 0;
    return ds_err_set(err, "beyond this rank's memory_limit of %.1f MiB", (double)limit / (1 << 20));
}

/* bytes from d (zeroed or not), counted in cat */
static void *alloc_on(ds_device *d, int zeroed, size_t bytes, ds_mem_cat cat, ds_err *err) {
    int over = within_limit(bytes, err) != 0;
    void *p = over ? NULL : (zeroed ? d->ops->alloc : d->ops->alloc_uninit)(d, bytes, err);
    if (!p) {
        explain(d, bytes, cat, over, err);
        return NULL;
    }
    count(bytes, cat);
    return p;
}

void *ds_alloc(size_t bytes, ds_mem_cat cat, ds_err *err) {
    return alloc_on(ds_device_get(), 1, bytes, cat, err);
}

void *ds_alloc_uninit(size_t bytes, ds_mem_cat cat, ds_err *err) {
    return alloc_on(ds_device_get(), 0, bytes, cat, err);
}

void ds_free(void *p, size_t bytes, ds_mem_cat cat) {
    if (!p) return;
    ds_device *d = ds_device_get();
    d->ops->free(d, p, bytes);
    uncount(bytes, cat);
}

void *ds_alloc_host(size_t bytes, ds_mem_cat cat, ds_err *err) {
    return alloc_on(ds_device_cpu(), 1, bytes, cat, err);
}

void ds_free_host(void *p, size_t bytes, ds_mem_cat cat) {
    if (!p) return;
    ds_device *h = ds_device_cpu();
    h->ops->free(h, p, bytes);
    uncount(bytes, cat);
}

void ds_mem_get_stats(ds_mem_stats *out) {
    for (int c = 0; c < DS_MEM_NCAT; c++) {
        out->current[c] = atomic_load(&g_current[c]);
        out->peak[c] = atomic_load(&g_peak[c]);
    }
    out->total_current = atomic_load(&g_total);
    out->total_peak = atomic_load(&g_total_peak);
    ds_device *d = ds_device_get();
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    out->reserved_unused = d->kind != DS_DEV_CPU && m.reserved > m.in_use ? m.reserved - m.in_use : 0;
}

void ds_mem_reset_peaks(void) {
    for (int c = 0; c < DS_MEM_NCAT; c++) atomic_store(&g_peak[c], atomic_load(&g_current[c]));
    atomic_store(&g_total_peak, atomic_load(&g_total));
}
