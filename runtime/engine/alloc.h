/* Every engine allocation is tagged with a category; each rank knows its current and
 * peak bytes per category. Memory figures in docs and benchmarks come from here. */
#ifndef DS_ALLOC_H
#define DS_ALLOC_H

#include <stddef.h>

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

/* 64-byte aligned, zeroed; NULL when out of memory. */
void *ds_alloc(size_t bytes, ds_mem_cat cat);
/* bytes must be what was asked of ds_alloc. NULL is ignored. */
void ds_free(void *p, size_t bytes, ds_mem_cat cat);

typedef struct ds_mem_stats {
    size_t current[DS_MEM_NCAT];
    size_t peak[DS_MEM_NCAT];
    size_t total_current, total_peak;
} ds_mem_stats;

void ds_mem_get_stats(ds_mem_stats *out);
void ds_mem_reset_peaks(void);

#endif
