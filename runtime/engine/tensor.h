/* A tensor: a typed, shaped view of memory on a device, with the allocation category it
 * counts against. Tensors own their storage unless made as views. */
#ifndef DS_TENSOR_H
#define DS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "ds_dtype.h"
#include "ds_err.h"

typedef enum ds_device { DS_CPU, DS_CUDA } ds_device;

#define DS_MAX_DIMS 4

typedef struct ds_tensor {
    ds_dtype dtype;
    ds_device device;
    ds_mem_cat cat;
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    int64_t numel;
    void *data;
    int owns; /* 1: data was ds_alloc'ed by this tensor and is freed with it */
} ds_tensor;

/* A zeroed CPU tensor; NULL with err on a bad shape or out of memory. */
ds_tensor *ds_tensor_new(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                         ds_err *err);
/* A view on memory owned elsewhere (not freed with the tensor). */
ds_tensor *ds_tensor_view(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                          void *data, ds_err *err);
void ds_tensor_free(ds_tensor *t);
size_t ds_tensor_nbytes(const ds_tensor *t);
/* Address of flat element i in the tensor's own dtype (no bounds check: i <= numel). */
void *ds_tensor_at(const ds_tensor *t, size_t i);

/* Reshapes an owning tensor in place, keeping the struct (so references to it stay
 * valid, like torch7's resize): storage is reallocated (zeroed) only when the byte size
 * changes. -1 with err on a bad shape or out of memory. */
int ds_tensor_resize(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err);
/* Frees an owning tensor's storage but keeps the struct (numel becomes 0); a later
 * resize allocates again. Activation checkpointing drops a span's buffers this way. */
void ds_tensor_release(ds_tensor *t);
/* 1 if a and b have the same ndim and sizes. */
int ds_tensor_same_shape(const ds_tensor *a, const ds_tensor *b);

#endif
