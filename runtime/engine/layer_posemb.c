/* Learned position embedding, added: out[b,t,:] = in[b,t,:] + table[t,:], table
 * [context, dim]. GPT-2's wpe. */
#include <string.h>

#include "kernels.h"
#include "layer.h"

static int posemb_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, l->out_dim, err) != 0) return -1;
    if (in->ndim != 3) return ds_err_set(err, "input has %d dimensions, expected [B,T,C]", in->ndim);
    int64_t B = in->shape[0], T = in->shape[1], C = l->out_dim;
    if (T > l->in_dim)
        return ds_err_set(err, "sequence length %lld exceeds the context %d", (long long)T,
                          l->in_dim);
    const ds_param *w = l->param[0];
    if (ds_layer_params_half(l)) {
        if (ds_layer_check_half(l, 0, err) != 0 || ds_out_like(l, in, C, err) != 0) return -1;
        DS_K->posemb16_forward(ds_half_of(w->dtype), l->out->data, in->data, w->half, (int)B,
                               (int)T, (int)C);
        return 0;
    }
    if (ds_out_like(l, in, C, err) != 0) return -1;
    for (int64_t b = 0; b < B; b++)
        DS_K->add_forward((float *)l->out->data + b * T * C, (const float *)in->data + b * T * C,
                       l->param[0]->data, (size_t)(T * C));
    return 0;
}

static int posemb_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                           ds_tensor *din, int acc, ds_err *err) {
    (void)r;
    int64_t B = in->shape[0], T = in->shape[1], C = l->out_dim;
    const ds_param *w = l->param[0];
    if (ds_layer_params_half(l) && ds_layer_check_half(l, 1, err) != 0) return -1;
    if (din) ds_grad_through(din, acc, dout);
    if (ds_layer_params_half(l)) {
        DS_K->posemb16_backward(ds_half_of(w->dtype), w->half_grad, dout->data, (int)B, (int)T,
                                (int)C);
        return 0;
    }
    for (int64_t b = 0; b < B; b++) /* batch order: fixed */
        DS_K->accumulate(w->grad, (const float *)dout->data + b * T * C, (size_t)(T * C));
    return 0;
}

/* input_only: backward reads the input's shape and the output gradient */
static const ds_layer_ops POSEMB = {
    .kind = "PositionEmbedding",
    .forward = posemb_forward,
    .backward = posemb_backward,
    .native_half = ds_layer_params_half,
    .input_only = ds_layer_yes,
};

ds_layer *ds_posemb_new(int context, int dim, float init_std, ds_err *err) {
    if (context < 1 || dim < 1)
        return ds_err_set(err, "PositionEmbedding: context=%d, d=%d (both must be >= 1)", context,
                          dim), NULL;
    ds_layer *l = ds_layer_alloc(&POSEMB, err);
    if (!l) return NULL;
    l->in_dim = context;
    l->out_dim = dim;
    if (!ds_layer_add_param(l, "weight", 2, context, dim, 1, DS_INIT_NORMAL, init_std, err)) {
        ds_layer_free(l);
        return NULL;
    }
    return l;
}
