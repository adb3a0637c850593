/* Containers: sequential (children in order), residual (x + f(x)) and checkpoint (keeps
 * only its input and its output; recomputes the inner activations in backward). Containers
 * answer no to input_only: their backward needs their children's forward state. */
#include <stdlib.h>

#include "kernels.h"
#include "layer.h"

static void borrow_out(ds_layer *l, const ds_tensor *t) {
    if (!l->out_borrowed) ds_tensor_free(l->out);
    l->out = (ds_tensor *)t;
    l->out_borrowed = 1;
}

/* Children [0, n) of l forward from in; *x: the last one's output (in for n = 0) */
static int forward_children(ds_layer *l, int n, const ds_run *r, const ds_tensor *in,
                            const ds_tensor **x, ds_err *err) {
    *x = in;
    for (int i = 0; i < n; i++) {
        if (ds_layer_forward(l->child[i], r, *x, err) != 0) return -1;
        *x = l->child[i]->out;
    }
    return 0;
}

static int sequential_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    const ds_tensor *x;
    if (forward_children(l, l->nchild, r, in, &x, err) != 0) return -1;
    borrow_out(l, x);
    return 0;
}

/* A Residual's branch ending in a layer that fuses into the add: that last child
 * computes the sum; the output is its, as in sequential_forward. */
static int sequential_fuses(const ds_layer *l, const ds_run *r) {
    return l->nchild && ds_layer_fuses_into_add(l->child[l->nchild - 1], r);
}

static int sequential_forward_add(ds_layer *l, const ds_run *r, const ds_tensor *in,
                                  const ds_tensor *x, ds_tensor *out, ds_err *err) {
    const ds_tensor *y;
    ds_layer *last = l->child[l->nchild - 1];
    if (forward_children(l, l->nchild - 1, r, in, &y, err) != 0) return -1;
    if (ds_layer_forward_add(last, r, y, x, out, err) != 0) return -1;
    borrow_out(l, last->out);
    return 0;
}

/* 1: t can hold the gradient at the boundary after child i: its type
 * (ds_layer_grad_dtype) and child i's output's shape; never for int32 ids */
static int fits(const ds_layer *l, int i, const ds_tensor *t) {
    const ds_tensor *o = l->child[i]->out;
    return t && o->dtype != DS_I32 && t->dtype == ds_layer_grad_dtype(l->child[i]) &&
           ds_tensor_same_shape(o, t);
}

/* *dx: a buffer of l's own for the gradient at the boundary after child i, shaped like
 * child i's output, fp32 or 16-bit as planned (ds_layer_grad_dtype), its values stale or,
 * new, not zeroed (on sim: NaN): child i + 1, its one contributor, writes it (no zeroing
 * pass; a 16-bit one is so rounded once); NULL when that output is int32 ids (no
 * gradient flows into them). */
static int boundary_grad(ds_layer *l, int i, ds_tensor **dx, ds_err *err) {
    *dx = NULL;
    if (!l->gbuf && !(l->gbuf = calloc((size_t)l->nchild, sizeof *l->gbuf)))
        return ds_err_set(err, "out of memory");
    const ds_tensor *o = l->child[i]->out;
    if (o->dtype == DS_I32) return 0;
    if (ds_tensor_ensure_uninit(&l->gbuf[i], ds_layer_grad_dtype(l->child[i]),
                                DS_MEM_ACTIVATIONS, o->ndim, o->shape, err) != 0)
        return -1;
    *dx = l->gbuf[i];
    return 0;
}

/* 1: backward runs child i of l in pass r (child 0 always; a later one unless it passes
 * its gradient through) */
static int runs_back(const ds_layer *l, int i, const ds_run *r) {
    return !i || !ds_layer_passes_through(l->child[i], r);
}

/* The first child backward runs that may not be called in place (acc = 0); nchild when
 * there is none: children [0, lead) can all pass their gradient on in one buffer. */
static int in_place_lead(const ds_layer *l, const ds_run *r) {
    for (int i = 0; i < l->nchild; i++)
        if (runs_back(l, i, r) && !ds_layer_grad_in_place(l->child[i], r, 0)) return i;
    return l->nchild;
}

/* Where child i (i > 0) of l writes its input gradient, the gradient at the boundary
 * before it, given d, the one after it, which it reads. Boundary gradients share one
 * buffer along a run of children that may be called in place (Residuals: no din = dout
 * copy, no buffer per boundary): d itself, when l may overwrite d (one of its own
 * buffers, or spare) and child i may run in place; spare, l's din when l writes it
 * (acc = 0: fresh storage, or dout itself when l runs in place), when every child before
 * i may then run in place on it down to child 0, whose din it is (lead: in_place_lead),
 * as child 0 could not take din == dout otherwise; else a buffer of l's own
 * (boundary_grad). Never the caller's dout, which l may not overwrite (a stage's output
 * gradient, a Residual's branch's: acc = 1). */
static int grad_target(ds_layer *l, const ds_run *r, int i, const ds_tensor *d,
                       const ds_tensor *dout, ds_tensor *spare, int lead, ds_tensor **dx,
                       ds_err *err) {
    int in_place = ds_layer_grad_in_place(l->child[i], r, 0) && fits(l, i - 1, d);
    if (d == spare) { /* on the run down to child 0, or off it for good */
        if (in_place && i < lead) return *dx = spare, 0;
    } else if (spare && i <= lead && fits(l, i - 1, spare)) {
        return *dx = spare, 0;
    } else if (d != dout && in_place) {
        return *dx = (ds_tensor *)d, 0; /* one of l's own buffers */
    }
    return boundary_grad(l, i - 1, dx, err);
}

static int sequential_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                               const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    if (!l->nchild && din) ds_grad_through(din, acc, dout); /* empty: the identity */
    ds_tensor *spare = acc ? NULL : din;
    int lead = spare ? in_place_lead(l, r) : 0;
    const ds_tensor *d = dout;
    for (int i = l->nchild - 1; i >= 0; i--) {
        if (!runs_back(l, i, r)) {
            /* the gradient at the boundary before child i is d itself: no buffer, no copy;
             * child i - 1 reads it as its dout, as it would read its own copy */
            if (d->dtype != ds_layer_grad_dtype(l->child[i - 1]))
                return ds_err_set(err, "backward: child %d passes a %s gradient through to a "
                                       "%s one", i, ds_dtype_name(d->dtype),
                                  ds_dtype_name(ds_layer_grad_dtype(l->child[i - 1])));
            continue;
        }
        const ds_tensor *x = i ? l->child[i - 1]->out : in;
        ds_tensor *dx = din;
        if (i && grad_target(l, r, i, d, dout, spare, lead, &dx, err) != 0) return -1;
        /* only the first child adds into the caller's din, as the caller says */
        if (ds_layer_backward(l->child[i], r, x, d, dx, i ? 0 : acc, err) != 0) return -1;
        d = dx;
        if (!d && i) return 0; /* nothing flows further back */
    }
    return 0;
}

/* In place with acc = 1 (a Residual's branch): dout stays unaliased (no spare), so the
 * last child run reads it into a buffer of l's own before child 0 adds into it; with
 * acc = 0 the same, or the children's gradients share dout's buffer (grad_target). One
 * child run: called as l is. None (an empty Sequential's din = dout): never. */
static int sequential_in_place(const ds_layer *l, const ds_run *r, int acc) {
    int runs = 0;
    for (int i = 0; i < l->nchild; i++) runs += runs_back(l, i, r);
    return runs > 1 || (runs == 1 && ds_layer_grad_in_place(l->child[0], r, acc));
}

static const ds_layer_ops SEQUENTIAL = {
    .kind = "Sequential",
    .forward = sequential_forward,
    .backward = sequential_backward,
    .grad_in_place = sequential_in_place,
    .fuses_into_add = sequential_fuses,
    .forward_add = sequential_forward_add,
};

ds_layer *ds_sequential_new(ds_err *err) { return ds_layer_alloc(&SEQUENTIAL, err); }

/* A branch ending in an active Dropout (ops->fuses_into_add) computes the sum itself,
 * x + dropout(f) in one kernel: the Dropout writes no output buffer of its own, and the
 * bits are those of the Dropout then add_forward. */
static int residual_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    ds_layer *f = l->child[0];
    if (in->dtype != DS_F32) return ds_err_set(err, "input is %s, expected fp32", ds_dtype_name(in->dtype));
    if (ds_layer_fuses_into_add(f, r)) {
        if (ds_out_like(l, in, ds_last(in), err) != 0) return -1;
        return ds_layer_forward_add(f, r, in, in, l->out, err);
    }
    if (ds_layer_forward(f, r, in, err) != 0) return -1;
    if (!ds_tensor_same_shape(f->out, in) || f->out->dtype != DS_F32)
        return ds_err_set(err, "the residual branch changes the shape or type of its input");
    if (ds_out_like(l, in, ds_last(in), err) != 0) return -1;
    DS_K->add_forward(l->out->data, in->data, f->out->data, (size_t)in->numel);
    return 0;
}

static int residual_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                             const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    if (!din) return ds_err_set(err, "a residual needs its input gradient buffer");
    /* din = dout (a copy when fresh; nothing in place: din is dout), then the branch
     * adds: the order of summing both into zeros, so the bits do not depend on acc nor on
     * aliasing, however the branch nests (a branch writing first would reorder the sums
     * of nested residuals) */
    if (din != dout) ds_grad_through(din, acc, dout);
    return ds_layer_backward(l->child[0], r, in, dout, din, 1, err);
}

/* In place (acc = 0) when its branch adds into its output gradient safely in place;
 * never with acc = 1: din += dout would double it. */
static int residual_in_place(const ds_layer *l, const ds_run *r, int acc) {
    return !acc && ds_layer_grad_in_place(l->child[0], r, 1);
}

static const ds_layer_ops RESIDUAL = {
    .kind = "Residual",
    .forward = residual_forward,
    .backward = residual_backward,
    .grad_in_place = residual_in_place,
};

static ds_layer *wrap(const ds_layer_ops *ops, ds_layer *inner, ds_err *err) {
    ds_layer *l = ds_layer_alloc(ops, err);
    if (!l) return NULL;
    if (ds_layer_add_child(l, inner, err) != 0) {
        free(l);
        return NULL;
    }
    return l;
}

ds_layer *ds_residual_new(ds_layer *inner, ds_err *err) { return wrap(&RESIDUAL, inner, err); }

static int is_sequential(const ds_layer *l) { return l->ops == &SEQUENTIAL; }

/* The child of Sequential n on the path to the leaf whose output a Residual's sum is
 * made of in pass r: the last one but trailing layers that pass their input through (an
 * inactive Dropout) and, when the Residual's branch fuses into its add (fused: n is then
 * on the branch's trailing path), the leaf that computes the sum (an active Dropout,
 * whose backward needs nothing of its forward either); -1 when there is none. */
static int path_child(const ds_layer *n, const ds_run *r, int fused) {
    int k = n->nchild - 1;
    if (fused && k >= 0 && !is_sequential(n->child[k]) && ds_layer_fuses_into_add(n->child[k], r))
        k--;
    while (k >= 0 && ds_layer_passes_through(n->child[k], r)) k--;
    return k;
}

/* The leaf whose output Residual res's branch ends with in pass r (through Sequentials,
 * their trailing pass-through layers and the Dropout that computes res's sum) when that
 * leaf's backward needs only its input and its output is fp32 (res sums it); else NULL. */
static ds_layer *branch_leaf(const ds_layer *res, const ds_run *r) {
    ds_layer *n = res->child[0];
    int fused = ds_layer_fuses_into_add(n, r);
    while (is_sequential(n)) {
        int k = path_child(n, r, fused);
        if (k < 0) return NULL;
        n = n->child[k];
    }
    return n->ops->input_only && n->ops->input_only(n) && n->out_dtype == DS_F32 ? n : NULL;
}

static int is_residual(const ds_layer *l) { return l->ops == &RESIDUAL; }

/* The span's trailing layer when the span keeps that layer's output as its own: its
 * backward needs only its input (ops->input_only), so the output need not be copied out
 * of the span nor the layer run again before its backward (for GPT's head, the logits:
 * one [B.T, V] buffer fewer, and the model's largest GEMM not run twice); or a Residual
 * whose branch ends in such a leaf (GPT's blocks: mlp.c_proj, then a Dropout that passes
 * through or computes the sum): its backward reads neither its output nor its branch's,
 * so the span keeps the Residual's sum and backward runs neither the sum nor that leaf
 * again. NULL: the span copies its output and recomputes all of itself. */
static ds_layer *kept_layer(ds_layer *l, const ds_run *r) {
    ds_layer *t = ds_layer_trailing(l->child[0]);
    if (!t) return NULL;
    if (t->ops->input_only && t->ops->input_only(t)) return t;
    return is_residual(t) && branch_leaf(t, r) ? t : NULL;
}

static int checkpoint_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    ds_layer *f = l->child[0], *t = kept_layer(l, r);
    if (ds_layer_forward(f, r, in, err) != 0) return -1;
    if (t) { /* the output stays t's: its next forward, or ds_layer_release, frees it */
        borrow_out(l, t->out);
        ds_layer_release_but(f, t);
        return 0;
    }
    const ds_tensor *o = f->out;
    if (ds_tensor_ensure_uninit(&l->out, o->dtype, DS_MEM_ACTIVATIONS, o->ndim, o->shape, err) != 0)
        return -1; /* copied over */
    ds_device *d = ds_tensor_device(l->out);
    d->ops->copy(d, l->out->data, o->data, ds_tensor_nbytes(o));
    ds_layer_release(f);
    return 0;
}

/* The span's forward again up to, not including, its kept trailing layer t: through the
 * Sequentials that lead to t, all their children but the last. t keeps its input
 * shape of the forward; its input is the recomputed output before it (*in on return). */
static int forward_until(ds_layer *f, const ds_layer *t, const ds_run *r, const ds_tensor **in,
                         ds_err *err) {
    while (f != t) {
        for (int i = 0; i + 1 < f->nchild; i++) {
            if (ds_layer_forward(f->child[i], r, *in, err) != 0) return -1;
            *in = f->child[i]->out;
        }
        f = f->child[f->nchild - 1];
    }
    return 0;
}

/* A kept Residual's branch again up to its leaf: the leaf does not run (its backward
 * needs only its input), its output only gets storage, not zeroed, shaped like the sum
 * (like), for the shape checks of the layers that pass it on (the pass-through layers
 * after it, the Sequentials whose output it is); nothing reads its values, so nothing
 * clears them. The layer that computed the sum (fused) is set up for its backward
 * without computing it again (forward_add with no out). */
static int branch_until(ds_layer *n, const ds_layer *leaf, const ds_run *r, const ds_tensor *in,
                        const ds_tensor *like, int fused, ds_err *err) {
    if (n == leaf) {
        return ds_tensor_ensure_uninit(&n->out, DS_F32, DS_MEM_ACTIVATIONS, like->ndim,
                                       like->shape, err);
    }
    int k = path_child(n, r, fused);
    for (int i = 0; i < k; i++) {
        if (ds_layer_forward(n->child[i], r, in, err) != 0) return -1;
        in = n->child[i]->out;
    }
    if (branch_until(n->child[k], leaf, r, in, like, fused, err) != 0) return -1;
    for (int i = k + 1; i < n->nchild; i++) { /* output = input, or the sum's layer */
        ds_layer *c = n->child[i];
        const ds_tensor *x = n->child[i - 1]->out;
        int sum = fused && i == n->nchild - 1 && ds_layer_fuses_into_add(c, r);
        int rc = sum ? ds_layer_forward_add(c, r, x, like, NULL, err)
                     : ds_layer_forward(c, r, x, err);
        if (rc != 0) return -1;
    }
    return 0;
}

static int checkpoint_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                               const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    ds_layer *f = l->child[0], *t = kept_layer(l, r);
    /* Same run keys as the forward: the recomputation is exact (dropout included). */
    const ds_tensor *at = in; /* t's input */
    int rc = t ? forward_until(f, t, r, &at, err) : ds_layer_forward(f, r, in, err);
    if (rc == 0 && t && is_residual(t)) /* the sum stays the forward's */
        rc = branch_until(t->child[0], branch_leaf(t, r), r, at, t->out,
                          ds_layer_fuses_into_add(t->child[0], r), err);
    if (rc == 0) rc = ds_layer_backward(f, r, in, dout, din, acc, err);
    /* the kept output stays, as a copy would: the span's output holds its gradient
     * after backward when the criterion wrote it there (the logits) */
    ds_layer_release_but(f, t);
    return rc;
}

/* As its child: the recomputation touches no gradient. */
static int checkpoint_in_place(const ds_layer *l, const ds_run *r, int acc) {
    return ds_layer_grad_in_place(l->child[0], r, acc);
}

static const ds_layer_ops CHECKPOINT = {
    .kind = "Checkpoint",
    .forward = checkpoint_forward,
    .backward = checkpoint_backward,
    .grad_in_place = checkpoint_in_place,
};

ds_layer *ds_checkpoint_new(ds_layer *inner, ds_err *err) { return wrap(&CHECKPOINT, inner, err); }
