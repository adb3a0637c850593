/* Every engine allocation is tagged with a category; each rank knows its current and
 * peak bytes per category. Memory figures in docs and benchmarks come from here.
 *
 * Memory comes from the rank's device (kernels/device.h) or, for tensors the host fills
 * and reads (a script's data, staging buffers of host libraries), from the host; both
 * count in the same categories, so ds.memory() means the same on every device. The
 * counters count the bytes asked for; what a device's caching allocator holds on top
 * (reserved but unused) is reported apart (ds_mem_get_stats). */
#ifndef DS_ALLOC_H
#define DS_ALLOC_H

#include <stddef.h>

#include "ds_err.h"

typedef enum ds_mem_cat {
    DS_MEM_PARAMS,
    DS_MEM_GRADS,
    DS_MEM_OPTIMIZER,
    DS_MEM_ACTIVATIONS,
    DS_MEM_COMM,
    DS_MEM_WORKSPACE,
    DS_MEM_DATA,
    DS_MEM_NCAT
} ds_mem_cat;

const char *ds_mem_cat_name(ds_mem_cat cat);

/* On the rank's device: zeroed (in stream order), 64-byte aligned; NULL with err saying
 * what was asked, what is free and what is in use per category. */
void *ds_alloc(size_t bytes, ds_mem_cat cat, ds_err *err);
/* The same, not zeroed (device.h's alloc_uninit: sim fills it with 0xff), for a buffer the
 * caller writes wholly before anything reads it; counted as ds_alloc's. */
void *ds_alloc_uninit(size_t bytes, ds_mem_cat cat, ds_err *err);
/* bytes must be what was asked. NULL is ignored. Stream-ordered on a device. */
void ds_free(void *p, size_t bytes, ds_mem_cat cat);
/* The same in host memory. */
void *ds_alloc_host(size_t bytes, ds_mem_cat cat, ds_err *err);
void ds_free_host(void *p, size_t bytes, ds_mem_cat cat);

typedef struct ds_mem_stats {
    size_t current[DS_MEM_NCAT];
    size_t peak[DS_MEM_NCAT];
    size_t total_current, total_peak;
    size_t reserved_unused; /* held by the device's caching allocator, not handed out */
} ds_mem_stats;

void ds_mem_get_stats(ds_mem_stats *out);
void ds_mem_reset_peaks(void);

/* The most this rank may hold, every category together (0: no limit but the device's).
 * The job's [engine] memory_limit (DS_ENGINE_MEMORY_LIMIT) is read on the first
 * allocation; this sets it from code (tests, the planner). An allocation that would pass
 * it fails like an out-of-memory one, naming the limit. */
void ds_mem_set_limit(size_t bytes);
size_t ds_mem_limit(void);

#endif
