/* Causal multi-head self-attention core: packed qkv [B,T,3C] -> [B,T,C]. The projections
 * around it (c_attn, c_proj) are Linear layers; nn.CausalSelfAttention composes them.
 * The fused kernels run (FlashAttention's scheme): the layer keeps one log-sum-exp per
 * row, lse [B,NH,T], instead of the [B,NH,T,T] probabilities, and backward recomputes
 * them, so attention memory grows with T, not T^2. In training with p > 0 the
 * probabilities are dropped (GPT-2's attn_pdrop) with a mask keyed like the Dropout
 * layer's (seed, step, layer, micro-batch, global row): the kernels draw each tile's
 * mask in forward and again in backward, and a checkpoint recomputation redraws the same
 * one; lse holds the undropped statistics. A backward must follow its own forward's run
 * (the same key, training or not), as a Dropout's must. Inside a 16-bit stage qkv and
 * the output may be 16-bit (ds_layer_plan_outputs): the fused kernels take and give them
 * as they are (the attention16 entries: on cuda the flash kernels widen in shared
 * memory; on cpu and sim fp32 copies in the entries' workspace). Softmax and its
 * statistics stay fp32. Backward writes a 16-bit dqkv where c_attn's backward takes one
 * (ds_layer_plan_outputs): the fused entry rounds the fp32 dqkv once. */
#include "kernels.h"
#include "layer.h"
#include "layer_workspace.h"

enum { SAVED, SCRATCH };

/* a batch row of the [B,NH,T,T] probabilities is NH*T*T elements */
static ds_rng_key key_of(const ds_layer *l, const ds_run *r, int64_t T) {
    return ds_run_key(l, r, (uint64_t)l->heads * (uint64_t)T * (uint64_t)T);
}

static float drop_p(const ds_layer *l, const ds_run *r) { return r->train ? l->p : 0.0f; }

/* the attention16 entries' workspace (layer_workspace.h) in *ws, NULL when none */
static int workspace(int backward, const ds_tensor *in, const ds_layer *l, int din16, void **ws,
                     ds_err *err) {
    return ds_layer_workspace_opt(
        ds_attention16_workspace(ds_device_attn16(ds_device_get()), backward,
                                 (size_t)ds_rows(in), (size_t)(ds_last(in) / 3),
                                 in->dtype != DS_F32, l->out_dtype != DS_F32, din16),
        ws, err);
}

/* the 16-bit format of qkv or out (the stage's: both are, when both are 16-bit) */
static ds_half half_of(const ds_tensor *in, const ds_tensor *out) {
    return ds_half_of(in->dtype != DS_F32 ? in->dtype : out->dtype);
}

static int attention_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    if (ds_check_input(l, in, -1, err) != 0) return -1;
    if (in->ndim != 3) return ds_err_set(err, "input has %d dimensions, expected [B,T,3C]", in->ndim);
    int64_t B = in->shape[0], T = in->shape[1], C3 = in->shape[2];
    if (C3 % 3 || (C3 / 3) % l->heads)
        return ds_err_set(err, "input width %lld is not 3*C with C divisible by %d heads",
                          (long long)C3, l->heads);
    int64_t lse_shape[3] = {B, l->heads, T};
    void *ws;
    /* the workspace before out: the planner's order. The kernels write every lse. */
    if (workspace(0, in, l, 0, &ws, err) != 0 || ds_out_like(l, in, C3 / 3, err) != 0 ||
        ds_tensor_ensure_uninit(&l->buf[SAVED], DS_F32, DS_MEM_ACTIVATIONS, 3, lse_shape, err) != 0)
        return -1;
    int in16 = in->dtype != DS_F32, out16 = l->out->dtype != DS_F32;
    if (in16 && out16 && in->dtype != l->out->dtype)
        return ds_err_set(err, "qkv is %s, output %s: one 16-bit format expected",
                          ds_dtype_name(in->dtype), ds_dtype_name(l->out->dtype));
    float p = drop_p(l, r);
    ds_rng_key key = key_of(l, r, T);
    if (in16 || out16)
        DS_K->attention16_forward_fused(half_of(in, l->out), l->out->data, l->buf[SAVED]->data,
                                        in->data, (int)B, (int)T, (int)(C3 / 3), l->heads, p, key,
                                        in16, out16, ws);
    else
        DS_K->attention_forward_fused(l->out->data, l->buf[SAVED]->data, in->data, (int)B,
                                      (int)T, (int)(C3 / 3), l->heads, p, key);
    return 0;
}

static int attention_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                              const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    if (!din) return ds_err_set(err, "attention needs its input gradient buffer");
    if (!l->buf[SAVED] || !l->out) return ds_err_set(err, "attention backward before its forward");
    int64_t B = in->shape[0], T = in->shape[1], C = in->shape[2] / 3;
    int64_t scratch_shape[3] = {B, l->heads, T};
    int in16 = in->dtype != DS_F32, out16 = l->out->dtype != DS_F32, din16 = din->dtype != DS_F32;
    if (din16 && ((in16 && din->dtype != in->dtype) || (out16 && din->dtype != l->out->dtype)))
        return ds_err_set(err, "qkv gradient is %s, qkv %s: one 16-bit format expected",
                          ds_dtype_name(din->dtype), ds_dtype_name(in->dtype));
    void *ws;
    /* the workspace before the scratch: the planner's order; the scratch is clobbered */
    if (workspace(1, in, l, din16, &ws, err) != 0 ||
        ds_tensor_ensure_uninit(&l->buf[SCRATCH], DS_F32, DS_MEM_WORKSPACE, 3, scratch_shape,
                                err) != 0)
        return -1;
    float p = drop_p(l, r);
    ds_rng_key key = key_of(l, r, T);
    if (in16 || out16 || din16)
        DS_K->attention16_backward_fused(ds_half_of(din16 ? din->dtype : in16 ? in->dtype
                                                                               : l->out->dtype),
                                         din->data, acc, l->buf[SCRATCH]->data, dout->data,
                                         in->data, l->out->data, l->buf[SAVED]->data, (int)B,
                                         (int)T, (int)C, l->heads, p, key, in16, out16, din16, ws);
    else
        DS_K->attention_backward_fused(din->data, acc, l->buf[SCRATCH]->data, dout->data, in->data,
                                       l->out->data, l->buf[SAVED]->data, (int)B, (int)T, (int)C,
                                       l->heads, p, key);
    return 0;
}

/* input_only: no, backward reads the output and the saved log-sum-exp */
static const ds_layer_ops ATTENTION = {
    .kind = "Attention",
    .forward = attention_forward,
    .backward = attention_backward,
    .emits_half = ds_layer_any_half,
    .takes_half = ds_layer_any_half,
    .gives_half_grad = ds_layer_any_half, /* the fused backward's, dropout or not */
};

ds_layer *ds_attention_new(int heads, float p, ds_err *err) {
    if (heads < 1) return ds_err_set(err, "attention: heads=%d (must be >= 1)", heads), NULL;
    if (!(p >= 0 && p < 1)) return ds_err_set(err, "attention: p=%g (0 <= p < 1)", (double)p), NULL;
    ds_layer *l = ds_layer_alloc(&ATTENTION, err);
    if (l) l->heads = heads, l->p = p;
    return l;
}
