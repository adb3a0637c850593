/* The prediction: the engine's allocations replayed with sizes only (memplan.h). Each
 * function below names the engine function it mirrors; keep them in step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "layer_workspace.h"
#include "memplan_tree.h"
#include "zero.h"

typedef struct zstage {
    const ds_stage *s;
    ds_mp_choice c;
    size_t es;                  /* bytes per element of the working copy */
    int64_t numel, alloc_numel; /* flat length; what the engine allocates for it */
    int64_t shard, padded;
    mp_slot params, grads;      /* s->flat_params, s->flat_grads */
    mp_slot pshard, gshard;     /* zs->param_shard, zs->grad_shard */
    mp_slot m, v, master;       /* optimizer state (v unused by SGD) */
    mp_slot in_staged, grad_in;
    int gathered, inflight;     /* ZeRO-3 window: waited / started */
    int deps[8], ndeps;
    mp_node *root;
    mp_shape in;                /* the stage's input of the last forward */
} zstage;

typedef struct sim {
    const ds_mp_job *job;
    zstage *st;
    int n;
    size_t cur[DS_MP_NLINES], peak[DS_MP_NLINES], at_peak[DS_MP_NLINES];
    size_t cat_cur[DS_MEM_NCAT], cat_peak[DS_MEM_NCAT];
    size_t total, total_peak;
    char where[96], peak_at[96];
    mp_slot bucket[2], ring, images, losses, targets_staged, x, y;
    size_t images_bytes;
    int count_flops, in_backward;
    double fwd_flops, recompute_flops;
} sim;

/* ---- counting: alloc.c's count / uncount ---------------------------------------------- */

static void take(sim *S, mp_slot *sl, size_t bytes, ds_mp_line line) {
    ds_mem_cat cat = ds_mp_line_cat(line);
    sl->bytes = bytes, sl->live = 1, sl->line = line;
    S->cur[line] += bytes;
    if (S->cur[line] > S->peak[line]) S->peak[line] = S->cur[line];
    S->cat_cur[cat] += bytes;
    if (S->cat_cur[cat] > S->cat_peak[cat]) S->cat_peak[cat] = S->cat_cur[cat];
    S->total += bytes;
    if (S->total > S->total_peak) {
        S->total_peak = S->total;
        memcpy(S->at_peak, S->cur, sizeof S->cur);
        memcpy(S->peak_at, S->where, sizeof S->where);
    }
}

static void drop(sim *S, mp_slot *sl) {
    if (!sl->live) return;
    S->cur[sl->line] -= sl->bytes;
    S->cat_cur[ds_mp_line_cat(sl->line)] -= sl->bytes;
    S->total -= sl->bytes;
    sl->live = 0;
}

/* ds_tensor_ensure / ds_tensor_resize (zeroed or not: the bytes count the same): storage
 * again when the size changes. */
static void ensure(sim *S, mp_slot *sl, size_t bytes, ds_mp_line line) {
    if (sl->live && sl->bytes == bytes) return;
    drop(S, sl);
    take(S, sl, bytes, line);
}

/* zero.c's resize_keep: the new buffer exists before the old one goes. */
static void resize_keep(sim *S, mp_slot *sl, size_t bytes) {
    if (sl->live && sl->bytes == bytes) return;
    mp_slot n = {0};
    take(S, &n, bytes, sl->line);
    drop(S, sl);
    *sl = n;
}

/* Where the replay is, for "where the peak is": "step 2, backward of 'blocks'". */
static void at(sim *S, int step, const char *what, const char *stage) {
    if (stage) snprintf(S->where, sizeof S->where, "step %d, %s '%.40s'", step, what, stage);
    else snprintf(S->where, sizeof S->where, "step %d, %s", step, what);
}

/* ---- layers: layer*.c ------------------------------------------------------------------ */

static int64_t numel_of(const mp_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->d[i];
    return n;
}

static size_t f32_bytes(const mp_shape *s) { return (size_t)numel_of(s) * 4; }

/* the bytes of an activation of shape s: fp32, or 16-bit */
static size_t act_bytes(const mp_shape *s) { return (size_t)numel_of(s) * (s->half ? 2 : 4); }

static mp_shape with_last(const mp_shape *in, int64_t last) {
    mp_shape o = *in;
    o.d[o.ndim - 1] = last;
    o.f32 = 1;
    o.half = o.grad_half = 0;
    return o;
}

/* layer_linear.c's native_half (weight and bias in one 16-bit format) and
 * ds_layer_params_half, the other layers' (their parameters in one 16-bit format). */
static int native_half(const sim *S, const mp_node *n) {
    int t = S->st[n->powner[0]].c.precision;
    return t != DS_F32 && (n->nparam < 2 || S->st[n->powner[1]].c.precision == t);
}

static int precision_of(const sim *S, const mp_node *n, int p) {
    return S->st[n->powner[p]].c.precision;
}

/* ---- 16-bit activations: layer.c's ds_layer_plan_outputs and the kinds' emits_half /
 * takes_half ---------------------------------------------------------------------------- */

static int emits_half(const sim *S, const mp_node *n, int h) {
    switch (n->kind) {
    case MP_LINEAR:
    case MP_LAYERNORM: return n->nparam && native_half(S, n) && precision_of(S, n, 0) == h;
    case MP_GELU:
    case MP_ATTENTION: return 1;
    default: return 0;
    }
}

static int takes_half(const sim *S, const mp_node *n, int h) {
    switch (n->kind) {
    case MP_LINEAR: return n->nparam && native_half(S, n) && precision_of(S, n, 0) == h;
    case MP_GELU:
    case MP_ATTENTION: return 1;
    default: return 0;
    }
}

/* the kinds' takes_half_grad (a native Linear of format h) and gives_half_grad (GELU,
 * attention) */
static int takes_half_grad(const sim *S, const mp_node *n, int h) {
    return n->kind == MP_LINEAR && takes_half(S, n, h);
}

static int gives_half_grad(const mp_node *n) {
    return n->kind == MP_GELU || n->kind == MP_ATTENTION;
}

/* layer.c's end_leaf: through Sequentials and Checkpoints */
static mp_node *end_leaf(mp_node *n, int last) {
    while (n->kind == MP_SEQUENTIAL || n->kind == MP_CHECKPOINT) {
        if (!n->nkids) return NULL;
        n = n->kids[last ? n->nkids - 1 : 0];
    }
    return n;
}

static void plan_outputs(const sim *S, mp_node *n, int h) {
    n->out_half = n->grad_half = 0;
    for (int i = 0; i < n->nkids; i++) plan_outputs(S, n->kids[i], h);
    if (h == DS_F32 || n->kind != MP_SEQUENTIAL) return;
    for (int i = 0; i + 1 < n->nkids; i++) {
        mp_node *p = end_leaf(n->kids[i], 1), *c = end_leaf(n->kids[i + 1], 0);
        if (!p || !c || !emits_half(S, p, h) || !takes_half(S, c, h)) continue;
        p->out_half = 1;
        p->grad_half = takes_half_grad(S, p, h) && gives_half_grad(c);
    }
}

/* layer.c's ds_layer_plan_last, for a stage asked for a 16-bit output (stage.c) */
static void plan_last(const sim *S, mp_node *root, int h) {
    mp_node *p = end_leaf(root, 1);
    if (h != DS_F32 && p && emits_half(S, p, h) && takes_half_grad(S, p, h))
        p->out_half = p->grad_half = 1;
}

/* the DS_MM16_* flags of a native Linear (layer_linear.c's io16_of) */
static int linear_io16(const mp_node *n, const mp_shape *in, int grads) {
    int out16 = grads ? n->grad_half : n->out_half;
    return (in->half ? DS_MM16_IN : 0) | (out16 ? DS_MM16_OUT : 0);
}

/* the layer workspace a layer takes (layer_workspace.h): a native 16-bit layer's
 * kernels', and the fp32 copies of 16-bit inputs and outputs */
static size_t workspace(const sim *S, const mp_node *n, const mp_shape *in, int grads) {
    size_t rows = (size_t)(numel_of(in) / in->d[in->ndim - 1]);
    int native = n->nparam && native_half(S, n);
    switch (n->kind) {
    case MP_LINEAR:
        return native ? ds_matmul16_workspace(S->job->gemm16, grads, rows, (size_t)n->in_dim,
                                              (size_t)n->out_dim, linear_io16(n, in, grads))
                      : 0;
    case MP_EMBEDDING: /* ids [B,T]: one position per id */
        return native && grads
                   ? ds_embedding16_workspace((size_t)numel_of(in), (size_t)n->out_dim) : 0;
    case MP_LAYERNORM: return native ? ds_layernorm16_workspace(grads, (size_t)n->in_dim) : 0;
    case MP_ATTENTION: /* qkv [B,T,3C] */
        return ds_attention16_workspace(S->job->attn16, grads, rows,
                                        (size_t)(in->d[in->ndim - 1] / 3), in->half,
                                        n->out_half, grads && in->grad_half);
    default: return 0; /* GELU (gelu16: none), PositionEmbedding, containers */
    }
}

/* layer.c's make_images and ds_layer_workspace: one workspace buffer grown to the
 * largest layer's need, a native 16-bit layer's kernel workspace or the fp32 images of a
 * layer whose parameters mix formats. */
static void images(sim *S, const mp_node *n, const mp_shape *in, int grads) {
    size_t need = workspace(S, n, in, grads);
    if (n->nparam && !native_half(S, n)) {
        for (int p = 0; p < n->nparam; p++)
            if (S->st[n->powner[p]].c.precision != DS_F32)
                need += n->pnumel[p] * (grads ? 2 : 1) * 4;
    }
    if (need <= S->images_bytes) return;
    drop(S, &S->images);
    take(S, &S->images, need, DS_MP_IMAGES);
    S->images_bytes = need;
}

/* ds_layer_release_but (ds_layer_release: keep NULL) */
static void release(sim *S, mp_node *n, const mp_node *keep) {
    for (int i = 0; i < n->nkids; i++) release(S, n->kids[i], keep);
    if (n->kind != MP_SEQUENTIAL && n->kind != MP_DROPOUT && n != keep) drop(S, &n->out);
    for (int i = 0; i < MP_MAX_BUFS; i++) drop(S, &n->buf[i]);
    if (n->gbuf)
        for (int i = 0; i < n->nkids; i++) drop(S, &n->gbuf[i]);
}

/* ops->passes_through in training: a Dropout of p = 0 (its output is its input, its
 * input gradient its output gradient) */
static int passes_through(const mp_node *n) { return n->kind == MP_DROPOUT && !n->dropout; }

/* the Dropout's fuses_into_add in training: p > 0 */
static int fuses(const mp_node *n) { return n->kind == MP_DROPOUT && n->dropout; }

/* layer_containers.c's sequential_fuses and the Dropout's fuses_into_add in training: the
 * active Dropout a Residual's branch ends with (through Sequentials' last children),
 * which computes the Residual's sum; NULL when there is none */
static mp_node *fusing_dropout(mp_node *n) {
    while (n->kind == MP_SEQUENTIAL) {
        if (!n->nkids) return NULL;
        n = n->kids[n->nkids - 1];
    }
    return fuses(n) ? n : NULL;
}

/* layer_containers.c's path_child: a Sequential's last child but trailing layers that
 * pass through and, in a branch that fuses, the Dropout that computes the sum */
static int path_child(const mp_node *n, int fused) {
    int k = n->nkids - 1;
    if (fused && k >= 0 && fuses(n->kids[k])) k--;
    while (k >= 0 && passes_through(n->kids[k])) k--;
    return k;
}

/* layer_containers.c's branch_leaf: the input_only fp32 leaf a Residual's branch ends with */
static mp_node *branch_leaf(const mp_node *r) {
    mp_node *n = r->kids[0];
    int fused = fusing_dropout(n) != NULL;
    while (n->kind == MP_SEQUENTIAL) {
        int k = path_child(n, fused);
        if (k < 0) return NULL;
        n = n->kids[k];
    }
    return n->input_only && !n->out_half ? n : NULL;
}

/* layer_containers.c's kept_layer: the span's trailing layer (ds_layer_trailing: through
 * Sequentials) when its output is the span's own (an input_only leaf, or a Residual whose
 * branch ends in one), else NULL */
static mp_node *kept_layer(mp_node *ck) {
    mp_node *t = ck->kids[0];
    while (t->kind == MP_SEQUENTIAL) {
        if (!t->nkids) return NULL;
        t = t->kids[t->nkids - 1];
    }
    if (t->input_only) return t;
    return t->kind == MP_RESIDUAL && branch_leaf(t) ? t : NULL;
}

/* A slot held on from one line into another (a span's kept output): no byte moves. */
static void relabel(sim *S, mp_slot *sl, ds_mp_line line) {
    if (!sl->live || sl->line == line) return;
    size_t bytes = sl->bytes;
    drop(S, sl);
    take(S, sl, bytes, line);
}

static void count(sim *S, double flops) {
    if (!S->count_flops) return;
    if (S->in_backward) S->recompute_flops += flops;
    else S->fwd_flops += flops;
}

static int forward(sim *S, mp_node *n, const mp_shape *in, int inside, ds_err *err);

/* An attention layer's saved lse and its backward scratch, each [B,H,T] (the fused
 * kernels, with dropout or without). */
static size_t att_bytes(const mp_node *n, int64_t B, int64_t T) {
    return (size_t)(B * n->heads * T) * 4;
}

/* A leaf's output: its out_shape takes the leaf's type (out_half); its bytes. */
static size_t out_bytes(mp_node *n) {
    n->out_shape.half = n->out_half;
    n->out_shape.grad_half = n->grad_half;
    return act_bytes(&n->out_shape);
}

static int forward_leaf(sim *S, mp_node *n, const mp_shape *in, ds_mp_line kept, ds_err *err) {
    int64_t rows = in->ndim ? numel_of(in) / in->d[in->ndim - 1] : 0;
    switch (n->kind) {
    case MP_LINEAR:
        n->out_shape = with_last(in, n->out_dim);
        ensure(S, &n->out, out_bytes(n), kept);
        count(S, 2.0 * (double)rows * n->in_dim * n->out_dim);
        return 0;
    case MP_EMBEDDING:
        if (in->ndim >= 4) return ds_err_set(err, "%s: token ids of %d dimensions", n->path, in->ndim);
        n->out_shape = *in;
        n->out_shape.d[n->out_shape.ndim++] = n->out_dim;
        n->out_shape.f32 = 1;
        ensure(S, &n->out, out_bytes(n), kept);
        return 0;
    case MP_POSEMB:
    case MP_GELU:
        n->out_shape = with_last(in, in->d[in->ndim - 1]);
        ensure(S, &n->out, out_bytes(n), kept);
        return 0;
    case MP_LAYERNORM:
        n->out_shape = with_last(in, in->d[in->ndim - 1]);
        ensure(S, &n->out, out_bytes(n), kept);
        ensure(S, &n->buf[0], (size_t)rows * 4, kept);
        ensure(S, &n->buf[1], (size_t)rows * 4, kept);
        return 0;
    case MP_DROPOUT: /* out is the input, or the masked copy (none when fused) */
        n->out_shape = *in;
        if (n->dropout && !n->fused) ensure(S, &n->buf[0], f32_bytes(in), kept);
        return 0;
    case MP_ATTENTION: {
        if (in->ndim != 3 || in->d[2] % 3 || n->heads < 1)
            return ds_err_set(err, "%s: attention input is not [B,T,3C]", n->path);
        int64_t B = in->d[0], T = in->d[1], C = in->d[2] / 3;
        n->out_shape = with_last(in, C);
        ensure(S, &n->out, out_bytes(n), kept);
        ensure(S, &n->buf[0], att_bytes(n, B, T), kept); /* layer_attention.c's SAVED */
        count(S, 4.0 * (double)B * (double)T * (double)T * (double)C);
        return 0;
    }
    default: return ds_err_set(err, "%s: not a leaf", n->path);
    }
}

/* ds_layer_forward and the containers' forward (layer_containers.c). */
static int forward(sim *S, mp_node *n, const mp_shape *in, int inside, ds_err *err) {
    if (!in->ndim) return ds_err_set(err, "%s: input without a shape", n->path);
    images(S, n, in, 0);
    ds_mp_line kept = inside ? DS_MP_RECOMPUTE : DS_MP_ACT_KEPT;
    switch (n->kind) {
    case MP_SEQUENTIAL: {
        const mp_shape *x = in;
        for (int i = 0; i < n->nkids; i++) {
            if (forward(S, n->kids[i], x, inside, err) != 0) return -1;
            x = &n->kids[i]->out_shape;
        }
        n->out_shape = *x;
        return 0;
    }
    case MP_RESIDUAL: { /* fused: the sum's buffer first (residual_forward) */
        mp_node *fd = fusing_dropout(n->kids[0]);
        n->out_shape = *in;
        if (fd) {
            fd->fused = 1;
            ensure(S, &n->out, f32_bytes(in), kept);
        }
        if (forward(S, n->kids[0], in, inside, err) != 0) return -1;
        if (!fd) ensure(S, &n->out, f32_bytes(in), kept);
        return 0;
    }
    case MP_CHECKPOINT: {
        mp_node *t = kept_layer(n);
        if (forward(S, n->kids[0], in, 1, err) != 0) return -1;
        n->out_shape = n->kids[0]->out_shape;
        if (t) relabel(S, &t->out, kept); /* the span's output is t's */
        else ensure(S, &n->out, act_bytes(&n->out_shape), kept); /* a copy in the same type */
        release(S, n->kids[0], t);
        return 0;
    }
    default: return forward_leaf(S, n, in, kept, err);
    }
}

/* layer_containers.c's forward_until: the span again up to its kept layer t (*in: t's
 * input on return) */
static int forward_until(sim *S, mp_node *f, const mp_node *t, const mp_shape **in, ds_err *err) {
    while (f != t) {
        for (int i = 0; i + 1 < f->nkids; i++) {
            if (forward(S, f->kids[i], *in, 1, err) != 0) return -1;
            *in = &f->kids[i]->out_shape;
        }
        f = f->kids[f->nkids - 1];
    }
    return 0;
}

/* layer_containers.c's branch_until: a kept Residual's branch again up to its leaf, whose
 * output only gets storage shaped like the sum (the Dropout that computed the sum, after
 * it, takes no byte: fused) */
static int branch_until(sim *S, mp_node *n, const mp_node *leaf, const mp_shape *in,
                        const mp_shape *like, int fused, ds_err *err) {
    if (n == leaf) {
        n->out_shape = *like;
        ensure(S, &n->out, f32_bytes(like), DS_MP_RECOMPUTE);
        return 0;
    }
    int k = path_child(n, fused);
    for (int i = 0; i < k; i++) {
        if (forward(S, n->kids[i], in, 1, err) != 0) return -1;
        in = &n->kids[i]->out_shape;
    }
    if (branch_until(S, n->kids[k], leaf, in, like, fused, err) != 0) return -1;
    for (int i = k + 1; i < n->nkids; i++)
        if (forward(S, n->kids[i], &n->kids[i - 1]->out_shape, 1, err) != 0) return -1;
    return 0;
}

/* What a backward is asked of its input gradient (ds_layer_backward's din and acc) */
enum {
    GRAD_WANTED = 1,   /* din given */
    GRAD_ADDED = 2,    /* acc = 1 */
    GRAD_IN_PLACE = 4, /* din is dout */
};

/* layer_containers.c's runs_back: backward runs kid i of Sequential n */
static int runs_back(const mp_node *n, int i) { return !i || !passes_through(n->kids[i]); }

/* the containers' ops->grad_in_place in training (sequential_in_place, residual_in_place,
 * checkpoint_in_place); the leaves: never */
static int grad_in_place(const mp_node *n, int acc) {
    switch (n->kind) {
    case MP_SEQUENTIAL: {
        int runs = 0;
        for (int i = 0; i < n->nkids; i++) runs += runs_back(n, i);
        return runs > 1 || (runs == 1 && grad_in_place(n->kids[0], acc));
    }
    case MP_RESIDUAL: return !acc && grad_in_place(n->kids[0], 1);
    case MP_CHECKPOINT: return grad_in_place(n->kids[0], acc);
    default: return 0;
    }
}

/* layer_containers.c's in_place_lead */
static int in_place_lead(const mp_node *n) {
    for (int i = 0; i < n->nkids; i++)
        if (runs_back(n, i) && !grad_in_place(n->kids[i], 0)) return i;
    return n->nkids;
}

/* Which gradient a Sequential's d is: the caller's dout, its din, or gbuf[k] (k >= 0) */
enum { AT_DOUT = -1, AT_DIN = -2, AT_NONE = -3 };

static const mp_shape *at_shape(const mp_node *n, const mp_shape *in, int at) {
    return at == AT_DOUT ? &n->out_shape : at == AT_DIN ? in : &n->kids[at]->out_shape;
}

/* layer_containers.c's fits: t can hold the gradient after kid i */
static int fits(const mp_node *n, int i, const mp_shape *t) {
    const mp_shape *o = &n->kids[i]->out_shape;
    if (!o->f32 || o->ndim != t->ndim || o->grad_half != t->grad_half) return 0;
    for (int k = 0; k < o->ndim; k++)
        if (o->d[k] != t->d[k]) return 0;
    return 1;
}

/* layer_containers.c's grad_target and boundary_grad: where kid i writes its input
 * gradient (AT_NONE: int32 ids, none) */
static int grad_target(sim *S, mp_node *n, const mp_shape *in, int i, int d, int spare,
                       int lead, int inside) {
    const mp_shape *x = &n->kids[i - 1]->out_shape;
    int in_place = grad_in_place(n->kids[i], 0) && fits(n, i - 1, at_shape(n, in, d));
    if (d == AT_DIN) {
        if (in_place && i < lead) return AT_DIN;
    } else if (spare && i <= lead && fits(n, i - 1, in)) {
        return AT_DIN;
    } else if (d != AT_DOUT && in_place) {
        return d;
    }
    if (!x->f32) return AT_NONE;
    size_t bytes = (size_t)numel_of(x) * (x->grad_half ? 2 : 4);
    ensure(S, &n->gbuf[i - 1], bytes, inside ? DS_MP_RECOMPUTE : DS_MP_ACT_GRADS);
    return i - 1;
}

static int backward(sim *S, mp_node *n, const mp_shape *in, int din, int inside, ds_err *err);

/* layer_containers.c's sequential_backward: the boundary gradients, some in one buffer */
static int sequential_backward(sim *S, mp_node *n, const mp_shape *in, int din, int inside,
                               ds_err *err) {
    int spare = (din & GRAD_WANTED) && !(din & GRAD_ADDED);
    int lead = spare ? in_place_lead(n) : 0;
    int d = spare && (din & GRAD_IN_PLACE) ? AT_DIN : AT_DOUT;
    for (int i = n->nkids - 1; i >= 0; i--) {
        if (!runs_back(n, i)) continue; /* its gradient is the boundary's */
        const mp_shape *x = i ? &n->kids[i - 1]->out_shape : in;
        int dx = AT_DIN, flags = din & (GRAD_WANTED | GRAD_ADDED);
        if (i) {
            dx = grad_target(S, n, in, i, d, spare, lead, inside);
            flags = dx == AT_NONE ? 0 : GRAD_WANTED;
        }
        int same = i ? dx == d : d == AT_DIN || (d == AT_DOUT && (din & GRAD_IN_PLACE));
        if (flags && same) flags |= GRAD_IN_PLACE;
        if (backward(S, n->kids[i], x, flags, inside, err) != 0) return -1;
        if (i && dx == AT_NONE) return 0;
        d = dx;
    }
    return 0;
}

/* ds_layer_backward and the containers' backward; din: GRAD_* flags. */
static int backward(sim *S, mp_node *n, const mp_shape *in, int din, int inside, ds_err *err) {
    images(S, n, in, 1);
    switch (n->kind) {
    case MP_ATTENTION: {
        int64_t B = in->d[0], T = in->d[1];
        ensure(S, &n->buf[1], att_bytes(n, B, T), DS_MP_SCRATCH);
        return 0;
    }
    case MP_SEQUENTIAL: return sequential_backward(S, n, in, din, inside, err);
    case MP_RESIDUAL: /* din = dout (a copy, or nothing in place), then the branch adds */
        return backward(S, n->kids[0], in, din | GRAD_ADDED, inside, err);
    case MP_CHECKPOINT: {
        mp_node *t = kept_layer(n);
        int was = S->in_backward;
        S->in_backward = 1; /* the recomputation's FLOPs */
        const mp_shape *at = in;
        int rc = t ? forward_until(S, n->kids[0], t, &at, err) : forward(S, n->kids[0], in, 1, err);
        if (rc == 0 && t && t->kind == MP_RESIDUAL)
            rc = branch_until(S, t->kids[0], branch_leaf(t), at, &t->out_shape,
                              fusing_dropout(t->kids[0]) != NULL, err);
        S->in_backward = was;
        if (rc == 0) rc = backward(S, n->kids[0], in, din, 1, err);
        release(S, n->kids[0], t);
        return rc;
    }
    default: return 0;
    }
}

/* ---- ZeRO: zero.c ---------------------------------------------------------------------- */

static void start_gather(sim *S, int k) {
    zstage *z = &S->st[k];
    if (z->c.zero < 3 || z->gathered || z->inflight) return;
    ensure(S, &z->params, (size_t)z->padded * z->es, DS_MP_PARAM_WINDOWS);
    z->inflight = 1;
}

static void ensure_gathered(sim *S, int k) {
    zstage *z = &S->st[k];
    if (z->c.zero < 3 || z->gathered) return;
    start_gather(S, k);
    z->inflight = 0;
    z->gathered = 1;
}

static void release_params(sim *S, int k) {
    zstage *z = &S->st[k];
    if (z->c.zero < 3 || !z->gathered) return;
    drop(S, &z->params);
    z->gathered = 0;
}

static int needs(const sim *S, int k, int dep) {
    if (k < 0 || k >= S->n) return 0;
    for (int i = 0; i < S->st[k].ndeps; i++)
        if (S->st[k].deps[i] == dep) return 1;
    return 0;
}

static void gather_deps(sim *S, int k) {
    for (int i = 0; i < S->st[k].ndeps; i++) ensure_gathered(S, S->st[k].deps[i]);
}

static void prefetch_deps(sim *S, int k) {
    if (k < 0 || k >= S->n || !S->job->prefetch) return;
    for (int i = 0; i < S->st[k].ndeps; i++) start_gather(S, S->st[k].deps[i]);
}

static void release_deps(sim *S, int k, int next) {
    for (int i = 0; i < S->st[k].ndeps; i++)
        if (!needs(S, next, S->st[k].deps[i])) release_params(S, S->st[k].deps[i]);
}

static void ring(sim *S) { /* gloo_shim.cc: made by the first reduce-scatter */
    if (S->job->world > 1 && S->job->gloo && !S->ring.live)
        take(S, &S->ring, DS_COMM_GLOO_RING_BYTES, DS_MP_RING);
}

static void reduce_window(sim *S, int k) {
    zstage *z = &S->st[k];
    int64_t W = S->job->world;
    int64_t bucket = S->job->bucket_elems > 0 ? S->job->bucket_elems : DS_ZERO_BUCKET_ELEMS;
    int64_t col = bucket / W;
    if (col < 1) col = 1;
    if (col > z->shard) col = z->shard;
    if (z->shard > 0) {
        size_t bytes = (size_t)(col * W) * 4;
        for (int b = 0; b < 2; b++)
            if (!S->bucket[b].live || S->bucket[b].bytes < bytes) {
                drop(S, &S->bucket[b]);
                take(S, &S->bucket[b], bytes, DS_MP_BUCKETS);
            }
        ring(S);
    }
    drop(S, &z->grads);
}

static void setup_stage(sim *S, int k) {
    zstage *z = &S->st[k];
    int zero = z->c.zero;
    if (zero == 1 || zero == 2) resize_keep(S, &z->params, (size_t)z->padded * z->es);
    if (zero < 2) {
        if (zero == 1) resize_keep(S, &z->grads, (size_t)z->padded * z->es);
    } else {
        take(S, &z->gshard, (size_t)(z->shard > 0 ? z->shard : 1) * z->es, DS_MP_GRADS);
        drop(S, &z->grads);
    }
    if (zero == 3) {
        take(S, &z->pshard, (size_t)(z->shard > 0 ? z->shard : 1) * z->es, DS_MP_PARAMS);
        drop(S, &z->params);
    }
}

/* ---- a run: ds.Stage, ds.Model, model:train_step, the optimizer --------------------------- */

static void build_stages(sim *S) {
    for (int k = 0; k < S->n; k++) {
        zstage *z = &S->st[k];
        at(S, 0, "building stage", z->s->name);
        take(S, &z->params, (size_t)z->alloc_numel * z->es, DS_MP_PARAMS);
        take(S, &z->grads, (size_t)z->alloc_numel * z->es, DS_MP_GRADS);
        for (int i = 0; i < z->s->nparams; i++) { /* init_params */
            mp_slot host = {0};
            take(S, &host, z->s->params[i]->numel * 4, DS_MP_INIT);
            drop(S, &host);
        }
    }
    for (int k = 0; k < S->n; k++) {
        at(S, 0, "ZeRO's layout of stage", S->st[k].s->name);
        setup_stage(S, k);
    }
}

static mp_shape batch_shape(const ds_mp_job *job) {
    mp_shape s = {.ndim = job->batch_ndim, .f32 = job->batch_dtype == DS_F32};
    for (int i = 0; i < job->batch_ndim && i < 4; i++) s.d[i] = job->batch[i];
    return s;
}

static int micro_batch(sim *S, int step, ds_err *err) {
    const ds_mp_job *job = S->job;
    mp_shape x = batch_shape(job);
    drop(S, &S->x); /* the last micro-batch's tensors, collected */
    drop(S, &S->y);
    take(S, &S->x, (size_t)numel_of(&x) * ds_dtype_size(job->batch_dtype), DS_MP_DATA);
    take(S, &S->y, (size_t)job->targets * 4, DS_MP_DATA);
    for (int k = 0; k < S->n; k++) {
        zstage *z = &S->st[k];
        at(S, step, "forward of", z->s->name);
        gather_deps(S, k);
        prefetch_deps(S, k + 1);
        z->in = k ? S->st[k - 1].root->out_shape : x;
        if (k == 0 && !job->host_device) ensure(S, &z->in_staged, S->x.bytes, DS_MP_DATA);
        if (forward(S, z->root, &z->in, 0, err) != 0) return ds_err_prefix(err, "stage '%s'", z->s->name);
        release_deps(S, k, k == S->n - 1 ? k : k + 1);
    }
    const mp_shape *logits = &S->st[S->n - 1].root->out_shape;
    if (!logits->f32 || logits->ndim < 1) return ds_err_set(err, "the last stage's output is not logits");
    int64_t rows = numel_of(logits) / logits->d[logits->ndim - 1];
    if (rows != job->targets)
        return ds_err_set(err, "%lld targets for %lld rows of logits", (long long)job->targets, (long long)rows);
    at(S, step, "the loss", NULL);
    if (!job->host_device) ensure(S, &S->targets_staged, S->y.bytes, DS_MP_DATA);
    ensure(S, &S->losses, (size_t)rows * 4, DS_MP_ACT_KEPT);
    /* no d(logits): the criterion writes the gradient over the logits */
    for (int k = S->n - 1; k >= 0; k--) {
        zstage *z = &S->st[k];
        at(S, step, "backward of", z->s->name);
        gather_deps(S, k);
        for (int i = 0; i < z->ndeps; i++) {
            zstage *d = &S->st[z->deps[i]];
            if (d->c.zero >= 2 && !d->grads.live)
                take(S, &d->grads, (size_t)d->padded * d->es, DS_MP_GRAD_WINDOWS);
        }
        prefetch_deps(S, k - 1);
        if (z->in.f32) ensure(S, &z->grad_in, f32_bytes(&z->in), DS_MP_ACT_GRADS);
        if (backward(S, z->root, &z->in, z->in.f32, 0, err) != 0) return ds_err_prefix(err, "stage '%s'", z->s->name);
        if (z->c.zero >= 2) reduce_window(S, k);
        release_deps(S, k, k - 1);
    }
    return 0;
}

static void optimizer_step(sim *S, int step) {
    for (int k = 0; k < S->n; k++) {
        zstage *z = &S->st[k];
        at(S, step, "optimizer step of", z->s->name);
        int half = z->c.precision != DS_F32;
        size_t n = (size_t)(z->c.zero == 0 ? z->numel : (z->shard > 0 ? z->shard : 1)) * 4;
        if (!z->m.live) take(S, &z->m, n, DS_MP_MOMENTS);
        if (S->job->optim == DS_MP_ADAMW && !z->v.live) take(S, &z->v, n, DS_MP_MOMENTS);
        if (z->c.zero > 0) release_params(S, k);
        if (half && !z->master.live) take(S, &z->master, n, DS_MP_MASTERS);
    }
}

static int run(sim *S, int steps, ds_err *err) {
    build_stages(S);
    for (int step = 1; step <= steps; step++) {
        for (int micro = 1; micro <= S->job->accum; micro++) {
            S->count_flops = step == 1 && micro == 1;
            if (micro_batch(S, step, err) != 0) return -1;
        }
        S->count_flops = 0;
        for (int k = 0; k < S->n; k++)
            if (S->st[k].c.zero == 1) ring(S); /* zero.c's reduce: a reduce-scatter */
        optimizer_step(S, step);
    }
    return 0;
}

/* ---- the model ---------------------------------------------------------------------------- */

static int stage_index(const void *ctx, const ds_stage *owner) {
    const ds_mp_model *m = ctx;
    for (int k = 0; k < m->n; k++)
        if (m->stages[k] == owner) return k;
    return -1;
}

static void collect_deps(zstage *z, const mp_node *n) {
    for (int p = 0; p < n->nparam; p++) {
        int seen = 0;
        for (int i = 0; i < z->ndeps; i++) seen |= z->deps[i] == n->powner[p];
        if (!seen && z->ndeps < 8) z->deps[z->ndeps++] = n->powner[p];
    }
    for (int i = 0; i < n->nkids; i++) collect_deps(z, n->kids[i]);
}

static int check_choice(const ds_stage *s, const ds_mp_choice *c, ds_err *err) {
    if (c->zero < 0 || c->zero > 3 || c->checkpoint < 0 ||
        (c->precision != DS_F32 && c->precision != DS_BF16 && c->precision != DS_F16))
        return ds_err_set(err, "planner: stage '%s': zero %d, checkpoint %d, precision %d is not "
                               "a choice", s->name, c->zero, c->checkpoint, c->precision);
    return 0;
}

static int setup(sim *S, const ds_mp_model *m, const ds_mp_choice *choice, mp_arena **arena,
                 ds_err *err) {
    int W = S->job->world;
    for (int k = 0; k < m->n; k++) {
        zstage *z = &S->st[k];
        const ds_stage *s = m->stages[k];
        if (check_choice(s, &choice[k], err) != 0) return -1;
        z->s = s;
        z->c = choice[k];
        z->es = ds_dtype_size((ds_dtype)z->c.precision);
        z->numel = (int64_t)s->numel;
        z->alloc_numel = z->numel ? z->numel : DS_PARAM_ALIGN;
        z->shard = (z->numel + W - 1) / W;
        z->padded = z->shard * W;
        if (!(z->root = mp_tree_build(arena, s, z->c.checkpoint, stage_index, m, err))) return -1;
        z->deps[z->ndeps++] = k; /* itself first, then owners of tied weights */
        collect_deps(z, z->root);
    }
    for (int k = 0; k < m->n; k++) { /* once every stage's precision is known (ties) */
        plan_outputs(S, S->st[k].root, S->st[k].c.precision);
        if (m->stages[k]->half_output) plan_last(S, S->st[k].root, S->st[k].c.precision);
    }
    return 0;
}

static double comm_bytes(const sim *S) {
    int W = S->job->world, A = S->job->accum;
    double total = 0;
    for (int k = 0; k < S->n && W > 1; k++) {
        const zstage *z = &S->st[k];
        double psi = (double)(z->c.zero == 0 ? z->numel : z->padded) * (double)z->es;
        double times = z->c.zero <= 1 ? 2 : z->c.zero == 2 ? A + 1 : 3.0 * A;
        total += times * psi * (W - 1) / W;
    }
    return total;
}

int ds_mp_predict(const ds_mp_model *m, const ds_mp_choice *choice, const ds_mp_job *job,
                  int steps, ds_mp_pred *out, ds_err *err) {
    memset(out, 0, sizeof *out);
    if (m->n < 1 || job->world < 1 || job->accum < 1 || job->batch_ndim < 1 || job->batch_ndim > 3)
        return ds_err_set(err, "planner: a model, a world >= 1, accum >= 1 and a batch shape are needed");
    sim S = {.job = job, .n = m->n};
    mp_arena *arena = NULL;
    if (!(S.st = calloc((size_t)m->n, sizeof *S.st))) return ds_err_set(err, "planner: out of memory");
    int rc = setup(&S, m, choice, &arena, err);
    if (rc == 0) rc = run(&S, steps, err);
    if (rc == 0) {
        memcpy(out->line_at_peak, S.at_peak, sizeof S.at_peak);
        memcpy(out->line_peak, S.peak, sizeof S.peak);
        memcpy(out->cat_peak, S.cat_peak, sizeof S.cat_peak);
        memcpy(out->cat_after, S.cat_cur, sizeof S.cat_cur);
        for (int l = 0; l < DS_MP_NLINES; l++) out->cat_at_peak[ds_mp_line_cat((ds_mp_line)l)] += S.at_peak[l];
        out->total_peak = S.total_peak;
        memcpy(out->peak_at, S.peak_at, sizeof out->peak_at);
        out->flops = 3.0 * S.fwd_flops * job->accum; /* backward: twice the forward */
        out->recompute_flops = S.recompute_flops * job->accum;
        out->comm_bytes = comm_bytes(&S);
        if (job->gemm_flops > 0 && (job->world == 1 || job->link_bytes_s > 0))
            out->step_s = (out->flops + out->recompute_flops) / job->gemm_flops +
                          (job->world > 1 ? out->comm_bytes / job->link_bytes_s : 0);
    }
    mp_arena_free(arena);
    free(S.st);
    return rc;
}
