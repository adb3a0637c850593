/* Layers: C modules with explicit forward and backward (torch7 nn style). A layer reads
 * its input tensor, writes its output into a tensor it keeps (l->out, reused across
 * calls), and in backward ACCUMULATES the gradients of its parameters into its stage's
 * flat gradient buffer and either ACCUMULATES (acc = 1) the gradient of its input into
 * a tensor the caller gives or WRITES it there (acc = 0: the tensor is fresh storage,
 * its contents garbage), the kernels' convention (kernel_table.h). The caller decides:
 * a gradient buffer with one contributor (a Sequential's boundary, the stage's input
 * gradient) is written, not zeroed and added to; a Residual's input gradient has two.
 * Where the layers say it is safe (ops->grad_in_place), a Sequential passes the gradients
 * of a run of children in one buffer, each called in place (din == dout): GPT's
 * residual stream has one gradient buffer and its Residuals make no din = dout copy.
 * Containers (sequential, residual, checkpoint) compose layers; the whole tree runs in C
 * without calling back into Lua. */
#ifndef DS_LAYER_H
#define DS_LAYER_H

#include <stdint.h>

#include "kernels.h"
#include "tensor.h"
#include "tensor_half.h"

struct ds_stage;

/* Where a pass is: keys the dropout RNG, so a recomputation draws the same masks. */
typedef struct ds_run {
    int train; /* 0: evaluation, dropout off */
    uint64_t seed;
    uint32_t step, micro;
    /* Global batch row of the input's first row (a data-parallel rank's slice of the
     * global batch starts at rank * local rows): dropout draws each row's mask by its
     * global position, so every world size draws the masks of the single-rank run. */
    uint64_t row0;
} ds_run;

typedef enum ds_init_kind { DS_INIT_ZEROS, DS_INIT_ONES, DS_INIT_NORMAL } ds_init_kind;

/* One parameter: a slice of its owner stage's flat buffers. */
typedef struct ds_param {
    char name[160]; /* dotted path of named layers, e.g. "h.0.attn.c_attn.weight" */
    int ndim;
    int64_t shape[2];
    size_t numel;
    int decay; /* 1: AdamW applies weight decay (not to biases and LayerNorm weights) */
    ds_init_kind init;
    float std;
    size_t offset; /* elements from the start of the owner's flat buffers */
    /* fp32 stages: slices of the flat buffers. 16-bit stages: fp32 images that exist only
     * while a layer using the parameter runs (ds_layer_forward / _backward make them from
     * half / half_grad and fold the image's gradient back), none for a layer that takes
     * its 16-bit parameters natively (ops->native_half); NULL otherwise. */
    float *data, *grad;
    ds_dtype dtype;               /* of the owner's flat buffers: fp32, bf16 or fp16 */
    uint16_t *half, *half_grad;   /* 16-bit stages: slices of the flat buffers */
    struct ds_stage *owner;
} ds_param;

typedef struct ds_layer ds_layer;

typedef struct ds_layer_ops {
    const char *kind;
    /* Computes l->out from in. Errors (shape, range) fill err and return -1. */
    int (*forward)(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err);
    /* Given the input of the last forward and dout (shaped like l->out), accumulates the
     * parameter gradients and d(input) into din (acc = 1) or writes d(input) over all of
     * din (acc = 0: din's values are never read, every element is written, zeros where
     * the input gets no gradient); din may be NULL: not wanted. */
    int (*backward)(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                    ds_tensor *din, int acc, ds_err *err);
    /* 1: this layer computes on its 16-bit parameters itself (half, half_grad), so
     * ds_layer_forward / _backward make no fp32 images for it. NULL: never. */
    int (*native_half)(const ds_layer *l);
    /* 16-bit activations inside a 16-bit stage (ds_layer_plan_outputs): 1 when this layer
     * can write its output in format h (emits_half) or take an input in format h
     * (takes_half). NULL: never (the output and the input stay fp32). */
    int (*emits_half)(const ds_layer *l, ds_dtype h);
    int (*takes_half)(const ds_layer *l, ds_dtype h);
    /* 1: this layer's backward needs nothing of its forward but its input (and its
     * parameters), never l->out's values nor a saved buffer, and l->out is a tensor of
     * its own (not its input, not a buffer). A checkpoint span ending with it then keeps
     * l->out as the span's output (no copy) and does not run this layer's forward again
     * before its backward (layer_containers.c). NULL: no. */
    int (*input_only)(const ds_layer *l);
    /* 16-bit activation gradients inside a 16-bit stage (ds_layer_plan_outputs): 1 when
     * this layer's backward takes its output gradient in format h as it is, with the bits
     * it gives for the fp32 gradient (takes_half_grad: a Linear on 16-bit parameters of
     * format h, whose matmul16 rounds an fp32 one to h anyway), or can write its input
     * gradient in h, the fp32 value rounded once (gives_half_grad). NULL: never. */
    int (*takes_half_grad)(const ds_layer *l, ds_dtype h);
    int (*gives_half_grad)(const ds_layer *l, ds_dtype h);
    /* 1: in pass r this layer's output is its input (forward borrows it) and its input
     * gradient is its output gradient, unchanged (an inactive Dropout). A Sequential then
     * hands the gradient after this layer to the child before it as the gradient at their
     * boundary (no buffer, no copy, this layer's backward not called), and a checkpoint
     * span's Residual branch looks past it to the layer whose output it sums. NULL: no. */
    int (*passes_through)(const ds_layer *l, const ds_run *r);
    /* 1: in pass r this layer's backward may be called in place with acc: din and dout
     * the same tensor (din == dout), which then holds the output gradient on entry and
     * the input gradient on return: with acc = 0 the input gradient alone (what a
     * Sequential asks of a child whose boundary gradients share one buffer: a Residual
     * then makes no din = dout copy, its din already holds dout), with acc = 1 the output
     * gradient plus it (what such a Residual asks of its branch). Safe where every read of
     * dout comes before the write of din that would change it: a Residual (acc = 0) whose
     * branch is safe with acc = 1; a Sequential whose last child run reads dout and a
     * different, first child writes din, or whose one child run is safe; a Checkpoint
     * whose child is. Never a leaf (a GEMM whose output aliases its input is undefined)
     * nor a Residual with acc = 1 (din += dout would double dout). ds_layer_backward
     * refuses an in-place call this does not allow. NULL: never. */
    int (*grad_in_place)(const ds_layer *l, const ds_run *r, int acc);
    /* 1: in pass r this layer, as the end of a Residual's branch, can compute that
     * Residual's sum itself (forward_add): an active Dropout, whose output then needs no
     * buffer of its own and no pass of its own; a Sequential whose last child can. NULL:
     * no. */
    int (*fuses_into_add)(const ds_layer *l, const ds_run *r);
    /* Where fuses_into_add says so, forward's stand-in: writes out = x + (this layer's
     * output for in), bit for bit what forward then the Residual's add_forward give, and
     * leaves l->out shaped as forward would (a Dropout's: its input, borrowed, whose
     * values no backward reads: the Dropout's needs only the mask, drawn again). out
     * NULL (a leaf, from a checkpoint span whose Residual's sum is kept): the sum is
     * there already; only what backward needs is set up, no kernel runs. */
    int (*forward_add)(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *x,
                       ds_tensor *out, ds_err *err);
} ds_layer_ops;

#define DS_LAYER_MAX_PARAMS 2
#define DS_LAYER_MAX_BUFS 3

struct ds_layer {
    const ds_layer_ops *ops;
    char name[64];  /* "" for an anonymous layer: adds nothing to parameter names */
    char path[192]; /* full path with child indices: unique, keys the dropout RNG */
    uint32_t rng_id;

    /* configuration (what each kind uses) */
    int in_dim, out_dim; /* linear; embedding: in_dim = vocab; posemb: in_dim = context */
    int heads;
    int has_bias;
    float eps, p; /* layernorm eps; dropout probability (dropout, attention) */

    ds_param *param[DS_LAYER_MAX_PARAMS];
    int tied[DS_LAYER_MAX_PARAMS]; /* 1: param belongs to another layer (not owned) */
    int nparam;

    ds_layer **child;
    int nchild;

    int in_ndim;                      /* shape of the last forward's input: backward */
    int64_t in_shape[DS_MAX_DIMS];    /* refuses an input that changed since */
    ds_tensor *out;                   /* forward output */
    ds_dtype out_dtype;               /* out's: fp32, or its stage's 16-bit format where the
                                       * next layer takes it (ds_layer_plan_outputs) */
    ds_dtype grad_dtype;              /* out's gradient's: fp32, or out_dtype where this
                                       * layer takes it in 16 bits and the next layer gives
                                       * it so (ds_layer_plan_outputs) */
    int out_borrowed;                 /* 1: out points at a child's or the input's tensor */
    ds_tensor *buf[DS_LAYER_MAX_BUFS]; /* saved activations / scratch, kind-specific */
    ds_tensor **gbuf;                 /* sequential: gradients at child boundaries */
};

/* The dropout key of layer l in pass r for a tensor of per_row elements per batch row:
 * offset by the rows before this rank's slice, so every world size draws the masks of
 * the single-rank run. */
static inline ds_rng_key ds_run_key(const ds_layer *l, const ds_run *r, uint64_t per_row) {
    return (ds_rng_key){.seed = r->seed, .step = r->step, .layer = l->rng_id, .micro = r->micro,
                        .offset = r->row0 * per_row};
}

/* Constructors: NULL with err on a bad configuration. */
ds_layer *ds_linear_new(int in_dim, int out_dim, int bias, float init_std, ds_err *err);
ds_layer *ds_embedding_new(int vocab, int dim, float init_std, ds_err *err);
ds_layer *ds_posemb_new(int context, int dim, float init_std, ds_err *err);
ds_layer *ds_layernorm_new(int dim, float eps, ds_err *err);
ds_layer *ds_gelu_new(ds_err *err);
ds_layer *ds_dropout_new(float p, ds_err *err);
/* qkv [B,T,3C] -> [B,T,C]; p: dropout on the attention probabilities (training only) */
ds_layer *ds_attention_new(int heads, float p, ds_err *err);
ds_layer *ds_sequential_new(ds_err *err);
ds_layer *ds_residual_new(ds_layer *inner, ds_err *err);   /* out = x + inner(x) */
ds_layer *ds_checkpoint_new(ds_layer *inner, ds_err *err); /* keeps only its input */

/* Shared by the kinds. */
ds_layer *ds_layer_alloc(const ds_layer_ops *ops, ds_err *err);
int ds_layer_add_child(ds_layer *parent, ds_layer *child, ds_err *err);
ds_param *ds_layer_add_param(ds_layer *l, const char *name, int ndim, int64_t d0, int64_t d1,
                             int decay, ds_init_kind init, float std, ds_err *err);
/* Ties slot `slot` of l to p (owned by another layer); shapes must match. */
int ds_layer_tie_param(ds_layer *l, int slot, ds_param *p, ds_err *err);
void ds_layer_free(ds_layer *l); /* the whole subtree; not tied params */
/* Frees every activation buffer of the subtree (checkpointing, or end of training). */
void ds_layer_release(ds_layer *l);
/* The same, but for keep's output (a layer of the subtree, or NULL): what a checkpoint
 * span keeps as its output. */
void ds_layer_release_but(ds_layer *l, const ds_layer *keep);
/* Frees the layer workspace: a native 16-bit layer's kernel workspace, or the fp32 images
 * of a layer whose parameters mix formats (it comes back with the next such layer). */
void ds_layer_images_free(void);
/* That workspace, at least `bytes` long, for the layer running now (valid until the next
 * call): native 16-bit layers hand it to their kernels. Not zeroed (kernel_table.h: ws
 * is clobbered), and holds the last layer's bytes. */
void *ds_layer_workspace(size_t bytes, ds_err *err);
/* 1: all of l's parameters share one 16-bit format (the native_half of the layers whose
 * 16-bit kernels take every parameter in one format). */
int ds_layer_params_half(const ds_layer *l);
/* 0, or -1 with err naming a 16-bit parameter (or, with grads, its gradient) that ZeRO
 * has released: what a native 16-bit layer checks before its kernels read them. */
int ds_layer_check_half(const ds_layer *l, int grads, ds_err *err);
/* Runs forward / backward through the ops with the layer's path added to errors. */
int ds_layer_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err);
int ds_layer_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                      ds_tensor *din, int acc, ds_err *err);
/* out = x + l(in) through ops->forward_add (where ops->fuses_into_add says so), with the
 * bookkeeping of ds_layer_forward (the input's shape backward checks, errors' paths);
 * out NULL for a leaf: set up for backward only, the sum kept from the forward */
int ds_layer_forward_add(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *x,
                         ds_tensor *out, ds_err *err);
/* ops->fuses_into_add asked of l in pass r; 0 where the kind has none */
int ds_layer_fuses_into_add(const ds_layer *l, const ds_run *r);
/* ops->passes_through asked of l in pass r; 0 where the kind has none */
int ds_layer_passes_through(const ds_layer *l, const ds_run *r);
/* ops->grad_in_place asked of l in pass r with acc; 0 where the kind has none */
int ds_layer_grad_in_place(const ds_layer *l, const ds_run *r, int acc);
/* The input gradient of a layer whose output is its input plus something: din = dout
 * (acc = 0: a copy) or din += dout (acc = 1). */
void ds_grad_through(ds_tensor *din, int acc, const ds_tensor *dout);

/* Decides every layer's out_dtype in the tree under root for a stage of the given
 * precision: inside a Sequential, child i's output goes to child i + 1 (through nested
 * Sequentials and Checkpoints: the last leaf of child i, the first leaf of child i + 1);
 * it is written in the stage's 16-bit format when that producer emits it and that
 * consumer takes it, fp32 otherwise. The gradient at that boundary (grad_dtype) is 16-bit
 * too when the producer's backward takes a 16-bit output gradient as it is and the
 * consumer's backward gives its input gradient in 16 bits (takes_half_grad,
 * gives_half_grad: c_fc <- GELU, c_attn <- attention), fp32 otherwise. A Checkpoint
 * passes its child's output on in its type; Residual is neither, so its input and output,
 * the root's input and output (the stage's) and their gradients stay fp32. */
void ds_layer_plan_outputs(ds_layer *root, ds_dtype precision);
/* After it, for a stage asked for a 16-bit output (ds_stage_half_output): the root's last
 * leaf writes its output in format h (a 16-bit precision) when it emits it and its
 * backward takes its output gradient in h (a Linear); that gradient then comes in h. */
void ds_layer_plan_last(ds_layer *root, ds_dtype h);
/* The type of the gradient of l's output at a Sequential boundary: the grad_dtype of its
 * last leaf (through Sequentials and Checkpoints), fp32 for an empty Sequential. */
ds_dtype ds_layer_grad_dtype(const ds_layer *l);
/* emits_half / takes_half of a layer without parameters (GELU, Attention): any format */
int ds_layer_any_half(const ds_layer *l, ds_dtype h);
/* input_only of the kinds whose answer is always yes */
int ds_layer_yes(const ds_layer *l);
/* The layer whose output leaves l, through nested Sequentials only (l itself for any
 * other layer; NULL for an empty Sequential): a checkpoint span's trailing layer. */
ds_layer *ds_layer_trailing(ds_layer *l);

/* An empty owning tensor for l->out / buffers: storage comes with ds_tensor_resize. */
ds_tensor *ds_tensor_empty(ds_dtype dtype, ds_mem_cat cat);
/* Ensures *slot exists (dtype, cat) and has the given shape (new storage when the dtype
 * changed or the size did: zeroed). */
int ds_tensor_ensure(ds_tensor **slot, ds_dtype dtype, ds_mem_cat cat, int ndim, const int64_t *shape,
           ds_err *err);
/* The same, new storage not zeroed (ds_tensor_resize_uninit), for a buffer the caller's
 * kernels write wholly before anything reads it: a forward's output and statistics. A
 * kernel that writes part of its output (causal attention's [T, T] probabilities) or
 * adds into it (+=) takes ds_tensor_ensure. */
int ds_tensor_ensure_uninit(ds_tensor **slot, ds_dtype dtype, ds_mem_cat cat, int ndim,
                            const int64_t *shape, ds_err *err);
/* l->out shaped like in, but with the last dimension set to last, of l->out_dtype, not
 * zeroed (ds_tensor_ensure_uninit): every layer's forward writes all of its output. */
int ds_out_like(ds_layer *l, const ds_tensor *in, int64_t last, ds_err *err);
/* Rows = all but the last dimension. */
static inline int64_t ds_rows(const ds_tensor *t) {
    return t->ndim ? t->numel / t->shape[t->ndim - 1] : 0;
}
static inline int64_t ds_last(const ds_tensor *t) { return t->ndim ? t->shape[t->ndim - 1] : 0; }
/* Checks an input is fp32, or 16-bit where l takes it (ops->takes_half), with last
 * dimension c (c < 0: any). */
int ds_check_input(const ds_layer *l, const ds_tensor *in, int64_t c, ds_err *err);

#endif
