/* A tensor: a typed, shaped view of memory on a device, with the allocation category it
 * counts against. Tensors own their storage unless made as views. */
#ifndef DS_TENSOR_H
#define DS_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "device.h"
#include "ds_dtype.h"
#include "ds_err.h"

#define DS_MAX_DIMS 4

typedef struct ds_tensor {
    ds_dtype dtype;
    ds_device *dev; /* the device its memory is on; NULL: host memory */
    ds_mem_cat cat;
    int ndim;
    int64_t shape[DS_MAX_DIMS];
    int64_t numel;
    void *data;
    int owns; /* 1: data was allocated by this tensor and is freed with it */
    /* A host tensor with the same values, when this one was staged from it (a script's
     * token ids copied to the device): host-side checks read it instead. */
    const struct ds_tensor *mirror;
} ds_tensor;

/* The rank's kernels (kernels/kernel_table.h): what the engine calls. */
#define DS_K (ds_device_get()->k)

/* A zeroed tensor on the rank's device; NULL with err on a bad shape or out of memory. */
ds_tensor *ds_tensor_new(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                         ds_err *err);
/* The same in host memory (a script's tensors, data batches). */
ds_tensor *ds_tensor_new_host(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                              ds_err *err);
/* A view on memory owned elsewhere (not freed with the tensor), on dev (NULL: host). */
ds_tensor *ds_tensor_view(ds_device *dev, ds_dtype dtype, ds_mem_cat cat, int ndim,
                          const int64_t *shape, void *data, ds_err *err);
void ds_tensor_free(ds_tensor *t);
size_t ds_tensor_nbytes(const ds_tensor *t);
/* Address of flat element i in the tensor's own dtype (no bounds check: i <= numel). */
void *ds_tensor_at(const ds_tensor *t, size_t i);

/* Reshapes an owning tensor in place, keeping the struct (so references to it stay
 * valid, like torch7's resize): storage is reallocated (zeroed) only when the byte size
 * changes. -1 with err on a bad shape or out of memory. */
int ds_tensor_resize(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err);
/* The same, new storage not zeroed (alloc.h's ds_alloc_uninit; a host tensor's is): for
 * a tensor whose every element its caller writes before anything reads it. Storage kept
 * (same size) holds its old values, as with ds_tensor_resize. */
int ds_tensor_resize_uninit(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err);
/* Frees an owning tensor's storage but keeps the struct (numel becomes 0); a later
 * resize allocates again. Activation checkpointing drops a span's buffers this way. */
void ds_tensor_release(ds_tensor *t);
/* 1 if a and b have the same ndim and sizes. */
int ds_tensor_same_shape(const ds_tensor *a, const ds_tensor *b);

/* The device whose operations reach t's memory (host tensors: the cpu device's). */
static inline ds_device *ds_tensor_device(const ds_tensor *t) {
    return t->dev ? t->dev : ds_device_cpu();
}
/* 1 when the host may read and write t's data directly. */
static inline int ds_tensor_on_host(const ds_tensor *t) {
    return ds_device_is_host(ds_tensor_device(t));
}
/* Elements [first, first + n) of t to / from host memory; complete when they return. */
int ds_tensor_to_host(const ds_tensor *t, size_t first, size_t n, void *dst, ds_err *err);
int ds_tensor_from_host(ds_tensor *t, size_t first, size_t n, const void *src, ds_err *err);
/* Every element of t set to 0, in stream order. */
void ds_tensor_zero(ds_tensor *t);
/* h as the rank's device sees it: h itself when the device is the host, else a device
 * copy made (or reused) in *slot with h as its mirror. */
const ds_tensor *ds_tensor_stage(ds_tensor **slot, const ds_tensor *h, ds_mem_cat cat,
                                 ds_err *err);
/* The host-readable values of t: t, or the host tensor it was staged from; NULL when
 * neither is on the host. */
static inline const ds_tensor *ds_tensor_host_view(const ds_tensor *t) {
    return ds_tensor_on_host(t) ? t : t->mirror;
}
/* At least n doubles on the rank's device where kernels write sums (the loss, sums of
 * squares) for the host to copy back: kept across calls, grown when asked for more, and
 * not counted in any category (a few bytes of bookkeeping, not model memory). The
 * pointer is good until the next call. */
double *ds_device_scalars(size_t n, ds_err *err);
/* n doubles from the device to the host. */
int ds_scalars_read(const double *dev, size_t n, double *out, ds_err *err);

#endif
