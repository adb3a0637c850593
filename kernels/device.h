/* A device: where a rank's tensors live and its kernels run, behind one table the
 * engine calls and never looks past. Three kinds:
 *
 *   cpu   host memory; kernels run at once on the calling thread (kernels/cpu)
 *   sim   a simulated GPU for machines without one (kernels/sim): its memory is not
 *         addressable by host code (a host read of a device pointer faults), and its
 *         kernels are the CPU kernels, run asynchronously in stream order on a thread of
 *         the stream, so a missing copy, event wait or sync shows up as a fault or a
 *         wrong value; same kernels, same order: the same bits as cpu
 *   cuda  a CUDA GPU (kernels/cuda)
 *
 * The rules the engine keeps, as on a real GPU:
 *  - device memory is touched by the host only through to_host / from_host;
 *  - kernels and memory ops go to the device's compute stream, in order; they may not
 *    have run when the call returns (cpu: they have);
 *  - a buffer freed with free() may still be in use by queued work: the device reuses
 *    it only after that work (stream-ordered, like cudaFreeAsync);
 *  - asynchronous errors (a kernel's, a fault in the simulator) surface at the next
 *    call that waits (sync, to_host, event_sync) and stay sticky afterwards.
 * One device per process (a rank): ds_device_get() is it; cpu until ds_device_open. */
#ifndef DS_DEVICE_H
#define DS_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "kernel_table.h"

typedef enum ds_device_kind { DS_DEV_CPU, DS_DEV_SIM, DS_DEV_CUDA } ds_device_kind;

typedef struct ds_device ds_device;
typedef struct ds_stream ds_stream; /* NULL stands for the compute stream */
typedef struct ds_event ds_event;

/* A device's memory, for ds.memory(), the planner and out-of-memory messages. */
typedef struct ds_device_mem {
    size_t total;     /* the device's memory (cpu: physical memory) */
    size_t free;      /* what the device could still give (cpu: available memory) */
    size_t reserved;  /* held by the device's caching allocator (cpu: = in_use) */
    size_t in_use;    /* handed out and not freed */
} ds_device_mem;

typedef struct ds_device_ops {
    /* Memory: zeroed (in stream order), 64-byte aligned; NULL with err when the device
     * cannot give bytes (err says how much was asked and how much is free). */
    void *(*alloc)(ds_device *d, size_t bytes, ds_err *err);
    /* The same, not zeroed: for a buffer its caller writes wholly before anything reads
     * it (a layer's output, a workspace), which spares the device a memset per
     * allocation (cuda: a cudaMemsetAsync over the bytes). Its contents are unspecified:
     * cuda hands out what the pool's block last held; sim fills every byte with 0xff in
     * stream order (NaN as fp32, bf16 and fp16, -1 as int32), so a read before the write
     * shows as NaN or as bits unlike cpu's; cpu gives the allocator's memory as it is
     * (0xff-filled too in AddressSanitizer builds). */
    void *(*alloc_uninit)(ds_device *d, size_t bytes, ds_err *err);
    /* Stream-ordered: queued work may still use p. bytes is what was asked. */
    void (*free)(ds_device *d, void *p, size_t bytes);
    /* On the compute stream, in order with kernels. */
    void (*memset0)(ds_device *d, void *p, size_t bytes);
    void (*copy)(ds_device *d, void *dst, const void *src, size_t bytes); /* device to device */
    /* Host <-> device, complete when they return (they wait for the compute stream). */
    int (*to_host)(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err);
    int (*from_host)(ds_device *d, void *dst, const void *src, size_t bytes, ds_err *err);
    /* Waits for all queued work on every stream; the first asynchronous error. */
    int (*sync)(ds_device *d, ds_err *err);
    /* More streams (a communicator's), events to order them. */
    ds_stream *(*stream_new)(ds_device *d, ds_err *err);
    void (*stream_free)(ds_device *d, ds_stream *s);
    ds_event *(*event_new)(ds_device *d, ds_err *err);
    void (*event_free)(ds_device *d, ds_event *e);
    void (*event_record)(ds_device *d, ds_event *e, ds_stream *s); /* at s's current end */
    void (*stream_wait)(ds_device *d, ds_stream *s, ds_event *e);  /* s's later work waits */
    int (*event_sync)(ds_device *d, ds_event *e, ds_err *err);     /* the host waits */
    int (*event_done)(ds_device *d, ds_event *e);                  /* 1: reached */
    /* Runs fn(arg) on stream s in its order, with device pointers made addressable by
     * alias(): how a host library (Gloo) works on device memory in the simulator. cpu:
     * runs at once; cuda: NULL (NCCL runs on the stream itself). fn's return value, if
     * not 0, becomes the device's asynchronous error with fn's message. */
    int (*launch_host)(ds_device *d, ds_stream *s, int (*fn)(void *arg, ds_err *err),
                       void *arg, ds_err *err);
    /* p as code running on the device's streams addresses it (sim: the readable alias of
     * the no-access view the host holds; identity elsewhere). Only valid in fn above. */
    void *(*alias)(ds_device *d, const void *p);
    void (*mem_info)(ds_device *d, ds_device_mem *out);
    void (*close)(ds_device *d);
} ds_device_ops;

struct ds_device {
    ds_device_kind kind;
    char name[64];             /* "cpu", "sim", "cuda:0" */
    int index;                 /* the CUDA ordinal; 0 otherwise */
    const ds_device_ops *ops;
    const ds_kernel_table *k;  /* the kernels, on the compute stream */
    void *impl;
};

/* The process's device (cpu until ds_device_open succeeds). */
ds_device *ds_device_get(void);
/* Opens kind ("cpu" | "sim" | "cuda") as the process's device; index: the CUDA device.
 * Once per process; -1 with err when the device is not there (a build without CUDA, no
 * GPU, index beyond the count: the message says which and how many there are). */
int ds_device_open(const char *kind, int index, ds_err *err);
/* 1 when d's memory is host memory (cpu): the engine may then skip staging copies. */
static inline int ds_device_is_host(const ds_device *d) { return d->kind == DS_DEV_CPU; }
/* what the device's matmul16 entries take (kernel_table.h); sim runs the CPU kernels */
static inline ds_gemm16_form ds_device_gemm16(const ds_device *d) {
    return d->kind == DS_DEV_CUDA ? DS_GEMM16_HALF : DS_GEMM16_F32;
}

/* what the device's attention16 entries take (kernel_table.h); sim runs the CPU kernels */
static inline ds_attn16_form ds_device_attn16(const ds_device *d) {
    return d->kind == DS_DEV_CUDA ? DS_ATTN16_HALF : DS_ATTN16_F32;
}

/* The backends' constructors (kernels/cpu, kernels/sim, kernels/cuda). */
ds_device *ds_device_cpu(void);
ds_device *ds_device_sim_open(ds_err *err);
ds_device *ds_device_cuda_open(int index, ds_err *err); /* NULL with err without CUDA */

#endif
