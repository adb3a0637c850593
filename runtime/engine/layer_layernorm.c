/* LayerNorm over the last dimension; weight (ones) and bias (zeros), neither decayed. */
#include "kernels.h"
#include "layer.h"
#include "kernel_table.h"

enum { MEAN, RSTD };

/* a 16-bit stage's LayerNorm: its parameters (and in backward their gradients)
 * resident, its kernels' workspace (ds_layernorm16_workspace) */
static void *workspace16(const ds_layer *l, int backward, ds_err *err) {
    if (ds_layer_check_half(l, backward, err) != 0) return NULL;
    return ds_layer_workspace(ds_layernorm16_workspace(backward, (size_t)l->in_dim), err);
}

/* On 16-bit parameters of format h it can write its output in h (inside a 16-bit stage,
 * for a layer that takes it: ds_layer_plan_outputs), the layernorm16 kernel rounding
 * each fp32 value once as it stores it; its input stays fp32. */
static int emits_half(const ds_layer *l, ds_dtype h) {
    return ds_layer_params_half(l) && l->param[0]->dtype == h;
}

static int layernorm_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, l->in_dim, err) != 0) return -1;
    int64_t rows = ds_rows(in);
    const ds_param *w = l->param[0], *b = l->param[1];
    int half = ds_layer_params_half(l);
    /* the workspace before out: the planner's order */
    void *ws = half ? workspace16(l, 0, err) : NULL;
    if ((half && !ws) || ds_out_like(l, in, l->in_dim, err) != 0 ||
        ds_tensor_ensure_uninit(&l->buf[MEAN], DS_F32, DS_MEM_ACTIVATIONS, 1, &rows, err) != 0 ||
        ds_tensor_ensure_uninit(&l->buf[RSTD], DS_F32, DS_MEM_ACTIVATIONS, 1, &rows, err) != 0)
        return -1;
    if (half) {
        DS_K->layernorm16_forward(ds_half_of(w->dtype), l->out->data, l->buf[MEAN]->data,
                                  l->buf[RSTD]->data, in->data, w->half, b->half, (int)rows,
                                  l->in_dim, l->eps, l->out->dtype != DS_F32, ws);
    } else {
        DS_K->layernorm_forward(l->out->data, l->buf[MEAN]->data, l->buf[RSTD]->data, in->data,
                                w->data, b->data, (int)rows, l->in_dim, l->eps);
    }
    return 0;
}

static int layernorm_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                              const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    (void)r;
    if (!din) return ds_err_set(err, "LayerNorm needs its input gradient buffer");
    const ds_param *w = l->param[0], *b = l->param[1];
    if (ds_layer_params_half(l)) {
        void *ws = workspace16(l, 1, err);
        if (!ws) return -1;
        DS_K->layernorm16_backward(ds_half_of(w->dtype), din->data, acc, w->half_grad, b->half_grad,
                                   dout->data, in->data, w->half, l->buf[MEAN]->data,
                                   l->buf[RSTD]->data, (int)ds_rows(in), l->in_dim, ws);
        return 0;
    }
    DS_K->layernorm_backward(din->data, acc, l->param[0]->grad, l->param[1]->grad, dout->data,
                             in->data, l->param[0]->data, l->buf[MEAN]->data, l->buf[RSTD]->data,
                             (int)ds_rows(in), l->in_dim);
    return 0;
}

/* input_only: no, backward reads the mean and rstd its forward saved */
static const ds_layer_ops LAYERNORM = {
    .kind = "LayerNorm",
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .native_half = ds_layer_params_half,
    .emits_half = emits_half,
};

ds_layer *ds_layernorm_new(int dim, float eps, ds_err *err) {
    if (dim < 1) return ds_err_set(err, "LayerNorm: d=%d (must be >= 1)", dim), NULL;
    if (!(eps > 0)) return ds_err_set(err, "LayerNorm: eps=%g (must be > 0)", (double)eps), NULL;
    ds_layer *l = ds_layer_alloc(&LAYERNORM, err);
    if (!l) return NULL;
    l->in_dim = l->out_dim = dim;
    l->eps = eps;
    if (!ds_layer_add_param(l, "weight", 1, dim, 1, 0, DS_INIT_ONES, 0, err) ||
        !ds_layer_add_param(l, "bias", 1, dim, 1, 0, DS_INIT_ZEROS, 0, err)) {
        ds_layer_free(l);
        return NULL;
    }
    return l;
}
