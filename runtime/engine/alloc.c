#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

void *ds_alloc(size_t bytes, ds_mem_cat cat) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) return NULL;
    memset(p, 0, rounded ? rounded : 64);
    raise_peak(&g_peak[cat], atomic_fetch_add(&g_current[cat], bytes) + bytes);
    raise_peak(&g_total_peak, atomic_fetch_add(&g_total, bytes) + bytes);
    return p;
}

void ds_free(void *p, size_t bytes, ds_mem_cat cat) {
    if (!p) return;
    free(p);
    atomic_fetch_sub(&g_current[cat], bytes);
    atomic_fetch_sub(&g_total, bytes);
}

void ds_mem_get_stats(ds_mem_stats *out) {
    for (int c = 0; c < DS_MEM_NCAT; c++) {
        out->current[c] = atomic_load(&g_current[c]);
        out->peak[c] = atomic_load(&g_peak[c]);
    }
    out->total_current = atomic_load(&g_total);
    out->total_peak = atomic_load(&g_total_peak);
}

void ds_mem_reset_peaks(void) {
    for (int c = 0; c < DS_MEM_NCAT; c++) atomic_store(&g_peak[c], atomic_load(&g_current[c]));
    atomic_store(&g_total_peak, atomic_load(&g_total));
}
