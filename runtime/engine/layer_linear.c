/* Linear: out = in @ W^T + b, W [out, in] (PyTorch's layout). On a 16-bit stage the
 * weight and bias stay 16-bit: the matmul16 kernels round the fp32 activations to 16
 * bits and multiply them by the 16-bit weight with fp32 accumulation (tensor cores on
 * cuda), in the layer workspace (ds_layer_workspace) rather than on fp32 images. Inside
 * a 16-bit stage its input and output may be 16-bit too (ds_layer_plan_outputs), and at
 * the end of a stage with a 16-bit output (16-bit logits) its output gradient: matmul16
 * takes and gives them as they are. */
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

/* the DS_MM16_* flags of a native Linear's 16-bit activations: its input, and its
 * output (forward) or output gradient (backward: 16-bit where its consumer's backward
 * gives it so, ds_layer_plan_outputs, or at the end of a stage whose output is 16-bit,
 * ds_layer_plan_last) */
static int io16_of(ds_dtype in, ds_dtype out) {
    return (in != DS_F32 ? DS_MM16_IN : 0) | (out != DS_F32 ? DS_MM16_OUT : 0);
}

/* the parameters (and in backward their gradients) resident; the kernels' workspace
 * (ds_matmul16_workspace) in *ws, NULL where it is empty (cuda with 16-bit activations) */
static int workspace16(const ds_layer *l, int backward, const ds_tensor *in, int io16, void **ws,
                       ds_err *err) {
    for (int i = 0; i < l->nparam; i++)
        if (!l->param[i]->half || (backward && !l->param[i]->half_grad))
            return ds_err_set(err, "parameter '%s' is not resident (released by ZeRO)",
                              l->param[i]->name);
    return ds_layer_workspace_opt(ds_matmul16_workspace(ds_device_gemm16(ds_device_get()),
                                                        backward, (size_t)ds_rows(in),
                                                        (size_t)l->in_dim, (size_t)l->out_dim,
                                                        io16),
                                  ws, err);
}

static int linear_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, l->in_dim, err) != 0) return -1;
    const ds_param *w = l->param[0], *b = l->has_bias ? l->param[1] : NULL;
    int N = (int)ds_rows(in);
    if (native_half(l)) {
        int io16 = io16_of(in->dtype, l->out_dtype);
        void *ws;
        if (workspace16(l, 0, in, io16, &ws, err) != 0 || /* before out: the planner's order */
            ds_out_like(l, in, l->out_dim, err) != 0)
            return -1;
        DS_K->matmul16_forward(ds_half_of(w->dtype), l->out->data, in->data, io16, w->half,
                               b ? b->half : NULL, N, l->in_dim, l->out_dim, ws);
        return 0;
    }
    if (ds_out_like(l, in, l->out_dim, err) != 0) return -1;
    DS_K->matmul_forward(l->out->data, in->data, w->data, b ? b->data : NULL, N, l->in_dim,
                         l->out_dim);
    return 0;
}

static int linear_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                           ds_tensor *din, int acc, ds_err *err) {
    (void)r;
    const ds_param *w = l->param[0], *b = l->has_bias ? l->param[1] : NULL;
    int N = (int)ds_rows(in);
    if (dout->dtype != DS_F32 && !(native_half(l) && dout->dtype == w->dtype))
        return ds_err_set(err, "output gradient is %s, expected fp32%s%s",
                          ds_dtype_name(dout->dtype), native_half(l) ? " or " : "",
                          native_half(l) ? ds_dtype_name(w->dtype) : "");
    if (native_half(l)) {
        int io16 = io16_of(in->dtype, dout->dtype);
        void *ws;
        if (workspace16(l, 1, in, io16, &ws, err) != 0) return -1;
        DS_K->matmul16_backward(ds_half_of(w->dtype), din ? din->data : NULL, acc, w->half_grad,
                                b ? b->half_grad : NULL, dout->data, in->data, io16, w->half, N,
                                l->in_dim, l->out_dim, ws);
        return 0;
    }
    DS_K->matmul_backward(din ? din->data : NULL, acc, w->grad, b ? b->grad : NULL, dout->data,
                          in->data, w->data, N, l->in_dim, l->out_dim);
    return 0;
}

/* input_only: backward reads the input, the weight and the output gradient; a 16-bit
 * output gradient is taken as it is (matmul16 rounds an fp32 one to it) */
static const ds_layer_ops LINEAR = {
    .kind = "Linear",
    .forward = linear_forward,
    .backward = linear_backward,
    .native_half = native_half,
    .emits_half = half_io,
    .takes_half = half_io,
    .input_only = ds_layer_yes,
    .takes_half_grad = half_io,
};

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
