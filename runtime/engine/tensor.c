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

/* Storage for t's shape where t lives (t->dev: the rank's device, or the host, whose
 * storage is always zeroed); zeroed 0: not zeroed on the device. */
static void *storage(const ds_tensor *t, size_t bytes, int zeroed, ds_err *err) {
    if (!t->dev) return ds_alloc_host(bytes, t->cat, err);
    return zeroed ? ds_alloc(bytes, t->cat, err) : ds_alloc_uninit(bytes, t->cat, err);
}

static void drop_storage(ds_tensor *t) {
    if (!t->owns || !t->data) return;
    if (t->dev) ds_free(t->data, ds_tensor_nbytes(t), t->cat);
    else ds_free_host(t->data, ds_tensor_nbytes(t), t->cat);
    t->data = NULL;
}

static ds_tensor *new_on(ds_device *dev, ds_dtype dtype, ds_mem_cat cat, int ndim,
                         const int64_t *shape, ds_err *err) {
    ds_tensor *t = make(dtype, cat, ndim, shape, err);
    if (!t) return NULL;
    t->dev = dev;
    if (!(t->data = storage(t, ds_tensor_nbytes(t), 1, err))) {
        ds_err_prefix(err, "tensor");
        free(t);
        return NULL;
    }
    t->owns = 1;
    return t;
}

ds_tensor *ds_tensor_new(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                         ds_err *err) {
    return new_on(ds_device_get(), dtype, cat, ndim, shape, err);
}

ds_tensor *ds_tensor_new_host(ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
                              ds_err *err) {
    return new_on(NULL, dtype, cat, ndim, shape, err);
}

ds_tensor *ds_tensor_view(ds_device *dev, ds_dtype dtype, ds_mem_cat cat, int ndim,
                          const int64_t *shape, void *data, ds_err *err) {
    ds_tensor *t = make(dtype, cat, ndim, shape, err);
    if (t) t->dev = dev, t->data = data;
    return t;
}

void ds_tensor_free(ds_tensor *t) {
    if (!t) return;
    drop_storage(t);
    free(t);
}

static int resize(ds_tensor *t, int ndim, const int64_t *shape, int zeroed, ds_err *err) {
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
        drop_storage(t);
        t->numel = numel;
        if (!(t->data = storage(t, (size_t)numel * ds_dtype_size(t->dtype), zeroed, err))) {
            t->numel = 0;
            return ds_err_prefix(err, "tensor of %lld elements", (long long)numel);
        }
        t->owns = 1;
    }
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    return 0;
}

int ds_tensor_resize(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err) {
    return resize(t, ndim, shape, 1, err);
}

int ds_tensor_resize_uninit(ds_tensor *t, int ndim, const int64_t *shape, ds_err *err) {
    return resize(t, ndim, shape, 0, err);
}

void ds_tensor_release(ds_tensor *t) {
    if (!t || !t->owns) return;
    drop_storage(t);
    t->numel = 0;
    t->ndim = 0; /* a released tensor fails every shape check instead of being read */
}

int ds_tensor_same_shape(const ds_tensor *a, const ds_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}


int ds_tensor_to_host(const ds_tensor *t, size_t first, size_t n, void *dst, ds_err *err) {
    size_t es = ds_dtype_size(t->dtype);
    if (first + n > (size_t)t->numel || (n && !t->data))
        return ds_err_set(err, "tensor: elements [%zu, %zu) of %lld%s", first, first + n,
                          (long long)t->numel, t->data ? "" : " (released)");
    ds_device *d = ds_tensor_device(t);
    return d->ops->to_host(d, dst, (const char *)t->data + first * es, n * es, err);
}

int ds_tensor_from_host(ds_tensor *t, size_t first, size_t n, const void *src, ds_err *err) {
    size_t es = ds_dtype_size(t->dtype);
    if (first + n > (size_t)t->numel || (n && !t->data))
        return ds_err_set(err, "tensor: elements [%zu, %zu) of %lld%s", first, first + n,
                          (long long)t->numel, t->data ? "" : " (released)");
    ds_device *d = ds_tensor_device(t);
    return d->ops->from_host(d, (char *)t->data + first * es, src, n * es, err);
}

void ds_tensor_zero(ds_tensor *t) {
    if (!t->data) return;
    ds_device *d = ds_tensor_device(t);
    d->ops->memset0(d, t->data, ds_tensor_nbytes(t));
}

const ds_tensor *ds_tensor_stage(ds_tensor **slot, const ds_tensor *h, ds_mem_cat cat,
                                 ds_err *err) {
    ds_device *d = ds_device_get();
    if (ds_device_is_host(d) || h->dev == d) return h;
    if (!*slot) {
        if (!(*slot = calloc(1, sizeof **slot))) return ds_err_set(err, "out of memory"), NULL;
        (*slot)->dev = d;
    }
    ds_tensor *t = *slot;
    if (t->dtype != h->dtype) ds_tensor_release(t); /* same count, other element size */
    t->dtype = h->dtype;
    t->cat = cat;
    if (ds_tensor_resize_uninit(t, h->ndim, h->shape, err) != 0) return NULL; /* copied over */
    if (d->ops->from_host(d, t->data, h->data, ds_tensor_nbytes(h), err) != 0) return NULL;
    t->mirror = h;
    return t;
}

static struct {
    double *p;
    size_t n;
} g_scalars;

double *ds_device_scalars(size_t n, ds_err *err) {
    if (n <= g_scalars.n) return g_scalars.p;
    ds_device *d = ds_device_get();
    size_t want = n < 64 ? 64 : n;
    double *p = d->ops->alloc(d, want * sizeof *p, err);
    if (!p) return ds_err_prefix(err, "device scalars"), NULL;
    if (g_scalars.p) d->ops->free(d, g_scalars.p, g_scalars.n * sizeof *p);
    g_scalars.p = p;
    g_scalars.n = want;
    return p;
}

int ds_scalars_read(const double *dev, size_t n, double *out, ds_err *err) {
    ds_device *d = ds_device_get();
    return d->ops->to_host(d, out, dev, n * sizeof *out, err);
}
