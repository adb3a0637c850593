/* The cpu device: device memory is host memory and every operation is done when the call
 * returns, so streams and events are trivially in order. The engine's CPU path is this
 * device: its costs are an indirect call per kernel and nothing else. */
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device.h"

/* Memory the engine frees stays in the process for the next step's buffers of the same
 * sizes, as a GPU's caching allocator keeps it: with glibc's defaults, a buffer from a
 * few hundred KiB up is mapped on allocation and unmapped (or trimmed) on free, and
 * activation checkpointing, which frees a span's activations after its forward and
 * makes them again in backward, paid a page fault per 4 KiB touched every step (it
 * measured 3.5x the forward's time instead of 1x; docs/memory.md). Buffers above the
 * largest mapping threshold glibc allows (32 MiB) are still mapped each time. */
static void keep_freed_memory(void) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

#if defined(__SANITIZE_ADDRESS__)
#define CPU_POISON 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_POISON 1
#endif
#endif

static size_t rounded(size_t bytes) { return bytes ? (bytes + 63) & ~(size_t)63 : 64; }

/* 64-byte aligned, as the allocator left it: recycled memory holds what it last held */
static void *cpu_alloc_uninit(ds_device *d, size_t bytes, ds_err *err) {
    (void)d;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, keep_freed_memory);
    void *p = aligned_alloc(64, rounded(bytes));
    if (!p) return ds_err_set(err, "out of host memory for %zu bytes", bytes), NULL;
#ifdef CPU_POISON
    /* as sim: a read before the write gives NaN, not plausible old values (the unit tests
     * run under ASan; the memset costs nothing that matters there) */
    memset(p, 0xff, rounded(bytes));
#endif
    return p;
}

static void *cpu_alloc(ds_device *d, size_t bytes, ds_err *err) {
    void *p = cpu_alloc_uninit(d, bytes, err);
    if (p) memset(p, 0, rounded(bytes));
    return p;
}

static void cpu_free(ds_device *d, void *p, size_t bytes) {
    (void)d, (void)bytes;
    free(p);
}

static void cpu_memset0(ds_device *d, void *p, size_t bytes) {
    (void)d;
    if (bytes) memset(p, 0, bytes);
}

static void cpu_copy(ds_device *d, void *dst, const void *src, size_t bytes) {
    (void)d;
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static int cpu_transfer(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err) {
    (void)err;
    cpu_copy(d, dst, src, bytes);
    return 0;
}

static int cpu_sync(ds_device *d, ds_err *err) {
    (void)d, (void)err;
    return 0;
}

/* Streams and events exist so that code written for a GPU runs unchanged: on the host
 * everything is already in order. One static object stands for all of them. */
static char g_token;

static ds_stream *cpu_stream_new(ds_device *d, ds_err *err) {
    (void)d, (void)err;
    return (ds_stream *)&g_token;
}
static void cpu_stream_free(ds_device *d, ds_stream *s) { (void)d, (void)s; }
static ds_event *cpu_event_new(ds_device *d, ds_err *err) {
    (void)d, (void)err;
    return (ds_event *)&g_token;
}
static void cpu_event_free(ds_device *d, ds_event *e) { (void)d, (void)e; }
static void cpu_event_record(ds_device *d, ds_event *e, ds_stream *s) { (void)d, (void)e, (void)s; }
static void cpu_stream_wait(ds_device *d, ds_stream *s, ds_event *e) { (void)d, (void)s, (void)e; }
static int cpu_event_sync(ds_device *d, ds_event *e, ds_err *err) {
    (void)d, (void)e, (void)err;
    return 0;
}
static int cpu_event_done(ds_device *d, ds_event *e) {
    (void)d, (void)e;
    return 1;
}

static int cpu_launch_host(ds_device *d, ds_stream *s, int (*fn)(void *, ds_err *), void *arg,
                           ds_err *err) {
    (void)d, (void)s;
    return fn(arg, err);
}

static void *cpu_alias(ds_device *d, const void *p) {
    (void)d;
    return (void *)p;
}

static void cpu_mem_info(ds_device *d, ds_device_mem *out) {
    (void)d;
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    memset(out, 0, sizeof *out);
    out->total = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    out->free = avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
}

static void cpu_close(ds_device *d) { (void)d; }

static const ds_device_ops CPU_OPS = {
    .alloc = cpu_alloc,
    .alloc_uninit = cpu_alloc_uninit,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .copy = cpu_copy,
    .to_host = cpu_transfer,
    .from_host = cpu_transfer,
    .sync = cpu_sync,
    .stream_new = cpu_stream_new,
    .stream_free = cpu_stream_free,
    .event_new = cpu_event_new,
    .event_free = cpu_event_free,
    .event_record = cpu_event_record,
    .stream_wait = cpu_stream_wait,
    .event_sync = cpu_event_sync,
    .event_done = cpu_event_done,
    .launch_host = cpu_launch_host,
    .alias = cpu_alias,
    .mem_info = cpu_mem_info,
    .close = cpu_close,
};

ds_device *ds_device_cpu(void) {
    static ds_device cpu = {DS_DEV_CPU, "cpu", 0, &CPU_OPS, &ds_cpu_kernels, NULL};
    return &cpu;
}
