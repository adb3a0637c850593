/* Linear: out = in @ W^T + b, W [out, in] (PyTorch's layout). On a 16-bit stage the
 * weight and bias stay 16-bit: the matmul16 kernels round the fp32 activations to 16
 * bits and multiply them by the 16-bit weight with fp32 accumulation (tensor cores on
 * cuda), in the layer workspace (ds_layer_workspace) rather than on fp32 images. Inside
 * a 16-bit stage its input and output may be 16-bit too (ds_layer_plan_outputs): the
 * input is widened into the workspace (matmul16's rounding of it is then exact) and the
 * fp32 output rounded into out. */
#include "kernels.h"
#include "layer.h"
#include "layer_workspace.h"

/* The weight and bias (if any) share one 16-bit format. A bias of another format (a
 * weight tied across stages of different precisions) goes through fp32 images instead. */
static int native_half(const ds_layer *l) {
    ds_dtype t = l->param[0]->dtype;
    return t != DS_F32 && (!l->has_bias || l->param[1]->dtype == t);
}

/* 16-bit activations: a native Linear takes a 16-bit input of its weight's format and
 * can write its output in it (the fp32 result rounded once per element). */
static int half_io(const ds_layer *l, ds_dtype h) {
    return native_half(l) && l->param[0]->dtype == h;
}

/* the parameters (and in backward their gradients) resident; the workspace of
 * layer_workspace.h, its parts laid out in *io */
static void *workspace16(const ds_layer *l, int backward, const ds_tensor *in, ds_ws_io *io,
                         ds_err *err) {
    for (int i = 0; i < l->nparam; i++)
        if (!l->param[i]->half || (backward && !l->param[i]->half_grad))
            return ds_err_set(err, "parameter '%s' is not resident (released by ZeRO)",
                              l->param[i]->name), NULL;
    *io = ds_linear_ws(ds_device_gemm16(ds_device_get()), backward, (size_t)ds_rows(in),
                       (size_t)l->in_dim, (size_t)l->out_dim, in->dtype != DS_F32,
                       l->out_dtype != DS_F32);
    return ds_layer_workspace(io->total, err);
}

static int linear_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, l->in_dim, err) != 0) return -1;
    const ds_param *w = l->param[0], *b = l->has_bias ? l->param[1] : NULL;
    int N = (int)ds_rows(in);
    if (native_half(l)) {
        ds_ws_io io = {0};
        char *ws = workspace16(l, 0, in, &io, err); /* before out: the planner's order */
        if (!ws || ds_out_like(l, in, l->out_dim, err) != 0) return -1;
        float *y = ds_out_f32(l, ds_ws_at(ws, io.out));
        const float *x = ds_in_f32(in, ds_ws_at(ws, io.in));
        DS_K->matmul16_forward(ds_half_of(w->dtype), y, x, w->half, b ? b->half : NULL, N,
                               l->in_dim, l->out_dim, ws);
        ds_out_round(l, y);
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
        ds_ws_io io = {0};
        char *ws = workspace16(l, 1, in, &io, err);
        if (!ws) return -1;
        const float *x = ds_in_f32(in, ds_ws_at(ws, io.in));
        DS_K->matmul16_backward(ds_half_of(w->dtype), din ? din->data : NULL, w->half_grad,
                                b ? b->half_grad : NULL, dout->data, x, w->half, N, l->in_dim,
                                l->out_dim, ws);
        return 0;
    }
    DS_K->matmul_backward(din ? din->data : NULL, w->grad, b ? b->grad : NULL, dout->data,
                          in->data, w->data, N, l->in_dim, l->out_dim);
    return 0;
}

static const ds_layer_ops LINEAR = {"Linear", linear_forward, linear_backward, native_half,
                                    half_io, half_io};

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
