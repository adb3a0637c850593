/* Linear: out = in @ W^T + b, W [out, in] (PyTorch's layout). On a 16-bit stage the
 * weight and bias stay 16-bit: the matmul16 kernels round the fp32 activations to 16
 * bits and multiply them by the 16-bit weight with fp32 accumulation (tensor cores on
 * cuda), in the layer workspace (ds_layer_workspace) rather than on fp32 images. */
#include "kernels.h"
#include "layer.h"

/* The weight and bias (if any) share one 16-bit format. A bias of another format (a
 * weight tied across stages of different precisions) goes through fp32 images instead. */
static int native_half(const ds_layer *l) {
    ds_dtype t = l->param[0]->dtype;
    return t != DS_F32 && (!l->has_bias || l->param[1]->dtype == t);
}

static void *workspace16(const ds_layer *l, int backward, int64_t rows, ds_err *err) {
    for (int i = 0; i < l->nparam; i++)
        if (!l->param[i]->half || (backward && !l->param[i]->half_grad))
            return ds_err_set(err, "parameter '%s' is not resident (released by ZeRO)",
                              l->param[i]->name), NULL;
    return ds_layer_workspace(ds_matmul16_workspace(ds_device_gemm16(ds_device_get()), backward,
                                                    (size_t)rows, (size_t)l->in_dim,
                                                    (size_t)l->out_dim),
                              err);
}

static int linear_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_f32_last(l, in, l->in_dim, err) != 0) return -1;
    const ds_param *w = l->param[0], *b = l->has_bias ? l->param[1] : NULL;
    int N = (int)ds_rows(in);
    if (native_half(l)) {
        void *ws = workspace16(l, 0, N, err); /* before out: the planner's order */
        if (!ws || ds_out_like(l, in, l->out_dim, err) != 0) return -1;
        DS_K->matmul16_forward(ds_half_of(w->dtype), l->out->data, in->data, w->half,
                               b ? b->half : NULL, N, l->in_dim, l->out_dim, ws);
        return 0;
    }
    if (ds_out_like(l, in, l->out_dim, err) != 0) return -1;
    DS_K->matmul_forward(l->out->data, in->data, w->data, b ? b->data : NULL, N, l->in_dim,
                         l->out_dim);
    return 0;
}

static int linear_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                           const ds_tensor *dout, ds_tensor *din, ds_err *err) {
    (void)r;
    const ds_param *w = l->param[0], *b = l->has_bias ? l->param[1] : NULL;
    int N = (int)ds_rows(in);
    if (native_half(l)) {
        void *ws = workspace16(l, 1, N, err);
        if (!ws) return -1;
        DS_K->matmul16_backward(ds_half_of(w->dtype), din ? din->data : NULL, w->half_grad,
                                b ? b->half_grad : NULL, dout->data, in->data, w->half, N,
                                l->in_dim, l->out_dim, ws);
        return 0;
    }
    DS_K->matmul_backward(din ? din->data : NULL, w->grad, b ? b->grad : NULL, dout->data,
                          in->data, w->data, N, l->in_dim, l->out_dim);
    return 0;
}

static const ds_layer_ops LINEAR = {"Linear", linear_forward, linear_backward, native_half};

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
