/* Linear: out = in @ W^T + b, W [out, in] (PyTorch's layout). */
#include "kernels.h"
#include "layer.h"

static int linear_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_f32_last(l, in, l->in_dim, err) != 0) return -1;
    if (ds_out_like(l, in, l->out_dim, err) != 0) return -1;
    const ds_param *b = l->has_bias ? l->param[1] : NULL;
    DS_K->matmul_forward(l->out->data, in->data, l->param[0]->data, b ? b->data : NULL,
                      (int)ds_rows(in), l->in_dim, l->out_dim);
    return 0;
}

static int linear_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                           const ds_tensor *dout, ds_tensor *din, ds_err *err) {
    (void)r; (void)err;
    const ds_param *b = l->has_bias ? l->param[1] : NULL;
    DS_K->matmul_backward(din ? din->data : NULL, l->param[0]->grad, b ? b->grad : NULL,
                       dout->data, in->data, l->param[0]->data, (int)ds_rows(in), l->in_dim,
                       l->out_dim);
    return 0;
}

static const ds_layer_ops LINEAR = {"Linear", linear_forward, linear_backward};

ds_layer *ds_linear_new(int in_dim, int out_dim, int bias, float init_std, ds_err *err) {
    if (in_dim < 1 || out_dim < 1)
        return ds_err_set(err, "Linear: in=%d, out=%d (both must be >= 1)", in_dim, out_dim), NULL;
    ds_layer *l = ds_layer_alloc(&LINEAR, err);
    if (!l) return NULL;
    l->in_dim = in_dim;
    l->out_dim = out_dim;
    l->has_bias = bias;
    if (!ds_layer_add_param(l, "weight", 2, out_dim, in_dim, 1, DS_INIT_NORMAL, init_std, err) ||
        (bias && !ds_layer_add_param(l, "bias", 1, out_dim, 1, 0, DS_INIT_ZEROS, 0, err))) {
        ds_layer_free(l);
        return NULL;
    }
    return l;
}
