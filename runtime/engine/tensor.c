#include "tensor.h"

#include <stdlib.h>
#include <string.h>

static ds_tensor *make(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                       ds_err *err) {
    if (ndim < 0 || ndim > DS_MAX_DIMS)
        return ds_err_set(err, "tensor: %d dimensions (1..%d allowed)", ndim, DS_MAX_DIMS), NULL;
    ds_tensor *t = calloc(1, sizeof *t);
    if (!t) return ds_err_set(err, "tensor: out of memory"), NULL;
    t->dtype = dtype;
    t->device = DS_CPU;
    t->cat = cat;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            free(t);
            return ds_err_set(err, "tensor: negative size %lld in dimension %d",
                              (long long)shape[i], i), NULL;
        }
        t->shape[i] = shape[i];
        t->numel *= shape[i];
    }
    return t;
}

size_t ds_tensor_nbytes(const ds_tensor *t) { return (size_t)t->numel * ds_dtype_size(t->dtype); }

void *ds_tensor_at(const ds_tensor *t, size_t i) { return (char *)t->data + i * ds_dtype_size(t->dtype); }

ds_tensor *ds_tensor_new(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                         ds_err *err) {
    ds_tensor *t = make(dtype, cat, ndim, shape, err);
    if (!t) return NULL;
    t->data = ds_alloc(ds_tensor_nbytes(t), cat);
    if (!t->data) {
        ds_err_set(err, "tensor: out of memory for %zu bytes of %s", ds_tensor_nbytes(t),
                   ds_mem_cat_name(cat));
        free(t);
        return NULL;
    }
    t->owns = 1;
    return t;
}

ds_tensor *ds_tensor_view(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                          void *data, ds_err *err) {
    ds_tensor *t = make(dtype, cat, ndim, shape, err);
    if (t) t->data = data;
    return t;
}

void ds_tensor_free(ds_tensor *t) {
    if (!t) return;
    if (t->owns) ds_free(t->data, ds_tensor_nbytes(t), t->cat);
    free(t);
}

int ds_tensor_resize(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err) {
    if (ndim < 0 || ndim > DS_MAX_DIMS)
        return ds_err_set(err, "tensor: %d dimensions (1..%d allowed)", ndim, DS_MAX_DIMS);
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ds_err_set(err, "tensor: negative size %lld in dimension %d",
                              (long long)shape[i], i);
        numel *= shape[i];
    }
    if (!t->owns && t->data && numel != t->numel)
        return ds_err_set(err, "tensor: cannot resize a view from %lld to %lld elements",
                          (long long)t->numel, (long long)numel);
    if (numel != t->numel || !t->data) {
        if (t->owns) ds_free(t->data, ds_tensor_nbytes(t), t->cat);
        t->data = NULL;
        t->numel = numel;
        t->data = ds_alloc((size_t)numel * ds_dtype_size(t->dtype), t->cat);
        if (!t->data) {
            t->numel = 0;
            return ds_err_set(err, "tensor: out of memory for %lld elements of %s",
                              (long long)numel, ds_mem_cat_name(t->cat));
        }
        t->owns = 1;
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return 0;
}

void ds_tensor_release(ds_tensor *t) {
    if (!t || !t->owns) return;
    ds_free(t->data, ds_tensor_nbytes(t), t->cat);
    t->data = NULL;
    t->numel = 0;
    t->ndim = 0; /* a released tensor fails every shape check instead of being read */
}

int ds_tensor_same_shape(const ds_tensor *a, const ds_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

