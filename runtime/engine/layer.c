/* What every layer kind shares: allocation, parameters, buffers, the error path. */
#include "layer.h"
#include "layer_workspace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds_layer *ds_layer_alloc(const ds_layer_ops *ops, ds_err *err) {
    ds_layer *l = calloc(1, sizeof *l);
    if (!l) return ds_err_set(err, "%s: out of memory", ops->kind), NULL;
    l->ops = ops;
    return l;
}

int ds_layer_add_child(ds_layer *parent, ds_layer *child, ds_err *err) {
    ds_layer **c = realloc(parent->child, (size_t)(parent->nchild + 1) * sizeof *c);
    if (!c) return ds_err_set(err, "%s: out of memory", parent->ops->kind);
    parent->child = c;
    parent->child[parent->nchild++] = child;
    return 0;
}

ds_param *ds_layer_add_param(ds_layer *l, const char *name, int ndim, int64_t d0, int64_t d1,
                             int decay, ds_init_kind init, float std, ds_err *err) {
    if (l->nparam == DS_LAYER_MAX_PARAMS)
        return ds_err_set(err, "%s: too many parameters", l->ops->kind), NULL;
    ds_param *p = calloc(1, sizeof *p);
    if (!p) return ds_err_set(err, "%s: out of memory", l->ops->kind), NULL;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 1;
    p->numel = (size_t)d0 * (size_t)(ndim > 1 ? d1 : 1);
    p->decay = decay;
    p->init = init;
    p->std = std;
    l->param[l->nparam] = p;
    l->tied[l->nparam] = 0;
    l->nparam++;
    return p;
}

int ds_layer_tie_param(ds_layer *l, int slot, ds_param *p, ds_err *err) {
    ds_param *mine = l->param[slot];
    if (mine->ndim != p->ndim || mine->shape[0] != p->shape[0] || mine->shape[1] != p->shape[1])
        return ds_err_set(err, "%s: cannot tie %s [%lld,%lld] to %s [%lld,%lld]", l->ops->kind,
                          mine->name, (long long)mine->shape[0], (long long)mine->shape[1],
                          p->name, (long long)p->shape[0], (long long)p->shape[1]);
    if (!l->tied[slot]) free(mine);
    l->param[slot] = p;
    l->tied[slot] = 1;
    return 0;
}

static void free_buffers(ds_layer *l) {
    if (!l->out_borrowed) ds_tensor_free(l->out);
    l->out = NULL;
    l->out_borrowed = 0;
    for (int i = 0; i < DS_LAYER_MAX_BUFS; i++) {
        ds_tensor_free(l->buf[i]);
        l->buf[i] = NULL;
    }
    if (l->gbuf)
        for (int i = 0; i < l->nchild; i++) ds_tensor_free(l->gbuf[i]);
}

void ds_layer_free(ds_layer *l) {
    if (!l) return;
    for (int i = 0; i < l->nchild; i++) ds_layer_free(l->child[i]);
    free(l->child);
    free_buffers(l);
    free(l->gbuf);
    for (int i = 0; i < l->nparam; i++)
        if (!l->tied[i]) free(l->param[i]);
    free(l);
}

void ds_layer_release(ds_layer *l) { ds_layer_release_but(l, NULL); }

void ds_layer_release_but(ds_layer *l, const ds_layer *keep) {
    for (int i = 0; i < l->nchild; i++) ds_layer_release_but(l->child[i], keep);
    if (!l->out_borrowed && l != keep) ds_tensor_release(l->out);
    for (int i = 0; i < DS_LAYER_MAX_BUFS; i++) ds_tensor_release(l->buf[i]);
    if (l->gbuf)
        for (int i = 0; i < l->nchild; i++) ds_tensor_release(l->gbuf[i]);
}

static int with_path(const ds_layer *l, ds_err *err) {
    /* Innermost layer names itself once; outer containers do not repeat the chain. */
    if (err && strncmp(err->msg, "layer ", 6) != 0)
        ds_err_prefix(err, "layer %s (%s)", l->path[0] ? l->path : "<root>", l->ops->kind);
    return -1;
}

/* ---- 16-bit parameters: the layer workspace, and fp32 images where still needed ------ */
/* A layer whose parameters live in a 16-bit stage takes them natively (ops->native_half:
 * Linear's matmul16, the embeddings' and LayerNorm's *16 kernels), handing its kernels
 * the layer workspace. The one exception is a layer whose parameters mix formats (a
 * Linear whose weight is tied to a stage of another precision than its bias's): it gets
 * fp32 images of its 16-bit parameters made just before its forward or backward and
 * dropped just after, their gradient image added into the 16-bit gradients with one
 * rounding per element and call. Layers run one at a time, so all of them share one
 * workspace buffer, grown to the largest layer's need and kept until
 * ds_layer_images_free: a fresh allocation per call would page-fault its way through
 * it several times a step. */

static struct {
    void *buf;
    size_t cap; /* bytes */
} g_images;

void ds_layer_images_free(void) {
    ds_free(g_images.buf, g_images.cap, DS_MEM_WORKSPACE);
    g_images.buf = NULL;
    g_images.cap = 0;
}

void *ds_layer_workspace(size_t bytes, ds_err *err) {
    if (bytes <= g_images.cap) return g_images.buf;
    ds_layer_images_free();
    if (!(g_images.buf = ds_alloc_uninit(bytes, DS_MEM_WORKSPACE, err))) /* clobbered */
        return ds_err_prefix(err, "%zu MB of layer workspace (16-bit parameters)", bytes >> 20),
               NULL;
    g_images.cap = bytes;
    return g_images.buf;
}

int ds_layer_workspace_opt(size_t bytes, void **ws, ds_err *err) {
    *ws = NULL;
    return bytes && !(*ws = ds_layer_workspace(bytes, err)) ? -1 : 0;
}

static int takes_half(const ds_layer *l) { return l->ops->native_half && l->ops->native_half(l); }

int ds_layer_params_half(const ds_layer *l) {
    ds_dtype t = l->param[0]->dtype;
    for (int i = 1; i < l->nparam; i++)
        if (l->param[i]->dtype != t) return 0;
    return t != DS_F32;
}

int ds_layer_check_half(const ds_layer *l, int grads, ds_err *err) {
    for (int i = 0; i < l->nparam; i++) {
        const ds_param *p = l->param[i];
        if (p->dtype != DS_F32 && (!p->half || (grads && !p->half_grad)))
            return ds_err_set(err, "parameter '%s' is not resident (released by ZeRO)", p->name);
    }
    return 0;
}

static void drop_images(ds_layer *l, int fold_grads) {
    if (takes_half(l)) return;
    for (int i = 0; i < l->nparam; i++) {
        ds_param *p = l->param[i];
        if (p->dtype == DS_F32) continue;
        if (p->grad && fold_grads) DS_K->half_acc_f32(ds_half_of(p->dtype), p->half_grad, p->grad, p->numel);
        p->data = p->grad = NULL;
    }
}

static int make_images(ds_layer *l, int grads, ds_err *err) {
    if (takes_half(l)) return 0;
    if (ds_layer_check_half(l, grads, err) != 0) return -1;
    size_t need = 0;
    for (int i = 0; i < l->nparam; i++)
        if (l->param[i]->dtype != DS_F32) need += l->param[i]->numel * (grads ? 2 : 1);
    if (need == 0) return 0;
    float *at = ds_layer_workspace(need * sizeof(float), err);
    if (!at) return -1;
    for (int i = 0; i < l->nparam; i++) {
        ds_param *p = l->param[i];
        if (p->dtype == DS_F32) continue;
        p->data = at;
        at += p->numel;
        DS_K->half_to_f32(ds_half_of(p->dtype), p->data, p->half, p->numel);
        if (!grads) continue;
        p->grad = at;
        at += p->numel;
        ds_device *d = ds_device_get();
        d->ops->memset0(d, p->grad, p->numel * sizeof(float)); /* the kernels accumulate */
    }
    return 0;
}

/* forward, or forward_add where x is not NULL */
static int run_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *x,
                       ds_tensor *out, ds_err *err) {
    l->in_ndim = -1;
    if (!in->data || in->ndim < 1) {
        ds_err_set(err, "input tensor has no storage (released?)");
        return with_path(l, err);
    }
    if (make_images(l, 0, err) != 0) return with_path(l, err);
    int rc = x ? l->ops->forward_add(l, r, in, x, out, err) : l->ops->forward(l, r, in, err);
    drop_images(l, 0);
    if (rc != 0) return with_path(l, err);
    l->in_ndim = in->ndim;
    for (int i = 0; i < in->ndim; i++) l->in_shape[i] = in->shape[i];
    return 0;
}

int ds_layer_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    return run_forward(l, r, in, NULL, NULL, err);
}

int ds_layer_forward_add(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *x,
                         ds_tensor *out, ds_err *err) {
    if (!ds_layer_fuses_into_add(l, r)) {
        ds_err_set(err, "forward_add: this layer does not fuse into an add in this pass");
        return with_path(l, err);
    }
    return run_forward(l, r, in, x, out, err);
}

int ds_layer_fuses_into_add(const ds_layer *l, const ds_run *r) {
    return l->ops->fuses_into_add && l->ops->fuses_into_add(l, r);
}

/* what a layer's 16-bit hook (emits_half, takes_half, ...) says; NULL: no */
static int asks(int (*hook)(const ds_layer *, ds_dtype), const ds_layer *l, ds_dtype h) {
    return hook && hook(l, h);
}

static int same_input(const ds_layer *l, const ds_tensor *in) {
    if (l->in_ndim != in->ndim || !in->data) return 0;
    for (int i = 0; i < in->ndim; i++)
        if (l->in_shape[i] != in->shape[i]) return 0;
    return 1;
}

int ds_layer_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                      ds_tensor *din, int acc, ds_err *err) {
    if (!same_input(l, in)) {
        ds_err_set(err, "backward: the input is not the last forward's (run forward again)");
        return with_path(l, err);
    }
    if (!l->out || !ds_tensor_same_shape(l->out, dout)) {
        ds_err_set(err, "backward: gradient shape does not match the last forward's output "
                        "(run forward first, with the same input)");
        return with_path(l, err);
    }
    if (din && din->dtype != DS_F32 && acc) {
        /* adding into 16 bits would round twice: a 16-bit gradient has one contributor */
        ds_err_set(err, "backward: a %s input gradient is written, never added to (acc = 1)",
                   ds_dtype_name(din->dtype));
        return with_path(l, err);
    }
    if (din && din->dtype != DS_F32 && !l->nchild && !asks(l->ops->gives_half_grad, l, din->dtype)) {
        ds_err_set(err, "backward: input gradient is %s, expected fp32", ds_dtype_name(din->dtype));
        return with_path(l, err);
    }
    if (din == dout && !ds_layer_grad_in_place(l, r, acc)) {
        ds_err_set(err, "backward: the input gradient is the output gradient (in place, "
                        "acc = %d), which this layer does not take", acc);
        return with_path(l, err);
    }
    if (make_images(l, 1, err) != 0) return with_path(l, err);
    int rc = l->ops->backward(l, r, in, dout, din, acc, err);
    drop_images(l, rc == 0);
    if (rc != 0) return with_path(l, err);
    return 0;
}

int ds_layer_passes_through(const ds_layer *l, const ds_run *r) {
    return l->ops->passes_through && l->ops->passes_through(l, r);
}

int ds_layer_grad_in_place(const ds_layer *l, const ds_run *r, int acc) {
    return l->ops->grad_in_place && l->ops->grad_in_place(l, r, acc);
}

void ds_grad_through(ds_tensor *din, int acc, const ds_tensor *dout) {
    if (acc) {
        DS_K->accumulate(din->data, dout->data, (size_t)dout->numel);
        return;
    }
    ds_device *d = ds_tensor_device(din);
    d->ops->copy(d, din->data, dout->data, ds_tensor_nbytes(dout));
}

ds_tensor *ds_tensor_empty(ds_dtype dtype, ds_mem_cat cat) {
    ds_tensor *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->dtype = dtype;
    t->dev = ds_device_get();
    t->cat = cat;
    return t;
}

static int ensure(ds_tensor **slot, ds_dtype dtype, ds_mem_cat cat, int ndim,
                  const int64_t *shape, int zeroed, ds_err *err) {
    if (!*slot && !(*slot = ds_tensor_empty(dtype, cat)))
        return ds_err_set(err, "out of memory");
    if ((*slot)->dtype != dtype) { /* the same elements need other bytes */
        ds_tensor_release(*slot);
        (*slot)->dtype = dtype;
    }
    return zeroed ? ds_tensor_resize(*slot, ndim, shape, err)
                  : ds_tensor_resize_uninit(*slot, ndim, shape, err);
}

int ds_tensor_ensure(ds_tensor **slot, ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
           ds_err *err) {
    return ensure(slot, dtype, cat, ndim, shape, 1, err);
}

int ds_tensor_ensure_uninit(ds_tensor **slot, ds_dtype dtype, ds_mem_cat cat, int ndim,
                            const int64_t *shape, ds_err *err) {
    return ensure(slot, dtype, cat, ndim, shape, 0, err);
}

int ds_out_like(ds_layer *l, const ds_tensor *in, int64_t last, ds_err *err) {
    int64_t shape[DS_MAX_DIMS];
    for (int i = 0; i < in->ndim; i++) shape[i] = in->shape[i];
    shape[in->ndim - 1] = last;
    if (l->out_borrowed) {
        l->out = NULL;
        l->out_borrowed = 0;
    }
    return ds_tensor_ensure_uninit(&l->out, l->out_dtype, DS_MEM_ACTIVATIONS, in->ndim, shape, err);
}

int ds_check_input(const ds_layer *l, const ds_tensor *in, int64_t c, ds_err *err) {
    int half = in->dtype == DS_BF16 || in->dtype == DS_F16;
    if (in->dtype != DS_F32 && !(half && l->ops->takes_half && l->ops->takes_half(l, in->dtype)))
        return ds_err_set(err, "input is %s, expected fp32", ds_dtype_name(in->dtype));
    if (c >= 0 && (in->ndim < 1 || ds_last(in) != c))
        return ds_err_set(err, "input's last dimension is %lld, expected %lld",
                          (long long)ds_last(in), (long long)c);
    return 0;
}

/* ---- 16-bit activations ------------------------------------------------------------------ */

static int is_sequential(const ds_layer *l) { return !strcmp(l->ops->kind, "Sequential"); }

/* A Checkpoint passes its child's output on in that output's type and keeps its input as
 * given, so a pair cut by a span boundary decides as it would uncut: turning checkpointing
 * on or changing the span length must not change the numbers. */
static int see_through(const ds_layer *l) {
    return is_sequential(l) || !strcmp(l->ops->kind, "Checkpoint");
}

/* The leaf at one end of l through nested Sequentials and Checkpoints (last: the end
 * whose output leaves l); NULL for an empty Sequential, itself for any other layer. */
static ds_layer *end_leaf(ds_layer *l, int last) {
    while (see_through(l)) {
        if (!l->nchild) return NULL;
        l = l->child[last ? l->nchild - 1 : 0];
    }
    return l;
}

/* A boundary gradient in 16 bits only where its producer, the consumer's backward, gives
 * exactly the values its one reader, the producer's backward, would round it to: then
 * every bit downstream is the fp32 gradient's, and the boundary has one contributor
 * (acc = 0), so it is rounded once. */
static void plan_outputs(ds_layer *l, ds_dtype h) {
    l->out_dtype = l->grad_dtype = DS_F32;
    for (int i = 0; i < l->nchild; i++) plan_outputs(l->child[i], h);
    if (h == DS_F32 || !is_sequential(l)) return;
    for (int i = 0; i + 1 < l->nchild; i++) {
        ds_layer *p = end_leaf(l->child[i], 1), *c = end_leaf(l->child[i + 1], 0);
        if (!p || !c || !asks(p->ops->emits_half, p, h) || !asks(c->ops->takes_half, c, h))
            continue;
        p->out_dtype = h;
        if (asks(p->ops->takes_half_grad, p, h) && asks(c->ops->gives_half_grad, c, h))
            p->grad_dtype = h;
    }
}

void ds_layer_plan_outputs(ds_layer *root, ds_dtype precision) { plan_outputs(root, precision); }

/* The output gradient of a stage's last layer comes in its output's type, so only a
 * layer whose backward takes a 16-bit one (a Linear: the head, whose output is the
 * logits) ends a stage in 16 bits. */
void ds_layer_plan_last(ds_layer *root, ds_dtype h) {
    ds_layer *p = end_leaf(root, 1);
    if (h != DS_F32 && p && asks(p->ops->emits_half, p, h) && asks(p->ops->takes_half_grad, p, h))
        p->out_dtype = p->grad_dtype = h;
}

ds_dtype ds_layer_grad_dtype(const ds_layer *l) {
    const ds_layer *p = end_leaf((ds_layer *)l, 1);
    return p ? p->grad_dtype : DS_F32;
}

int ds_layer_any_half(const ds_layer *l, ds_dtype h) {
    (void)l, (void)h;
    return 1;
}

int ds_layer_yes(const ds_layer *l) {
    (void)l;
    return 1;
}

ds_layer *ds_layer_trailing(ds_layer *l) {
    while (is_sequential(l)) {
        if (!l->nchild) return NULL;
        l = l->child[l->nchild - 1];
    }
    return l;
}

