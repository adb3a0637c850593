/* GELU, tanh approximation (GPT-2's). Inside a 16-bit stage it takes a 16-bit input and
 * writes a 16-bit output where its neighbours take them (ds_layer_plan_outputs): the
 * gelu16 entries widen and round per element, with no workspace; backward reads the
 * 16-bit input as it is, and writes a 16-bit input gradient where c_fc's backward takes
 * one (ds_layer_plan_outputs). */
#include "kernels.h"
#include "layer.h"

/* the 16-bit format of in or out (the stage's: both are, when both are 16-bit) */
static ds_half half_of(const ds_tensor *in, const ds_tensor *out) {
    return ds_half_of(in->dtype != DS_F32 ? in->dtype : out->dtype);
}

static int gelu_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, -1, err) != 0 || ds_out_like(l, in, ds_last(in), err) != 0)
        return -1;
    int in16 = in->dtype != DS_F32, out16 = l->out->dtype != DS_F32;
    if (in16 && out16 && in->dtype != l->out->dtype)
        return ds_err_set(err, "input is %s, output %s: one 16-bit format expected",
                          ds_dtype_name(in->dtype), ds_dtype_name(l->out->dtype));
    if (in16 || out16)
        DS_K->gelu16_forward(half_of(in, l->out), l->out->data, in->data, (size_t)in->numel,
                             in16, out16);
    else
        DS_K->gelu_forward(l->out->data, in->data, (size_t)in->numel);
    return 0;
}

static int gelu_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                         ds_tensor *din, int acc, ds_err *err) {
    (void)l, (void)r;
    if (!din) return 0;
    int din16 = din->dtype != DS_F32;
    if (din16 && din->dtype != in->dtype)
        return ds_err_set(err, "input is %s, its gradient %s: one 16-bit format expected",
                          ds_dtype_name(in->dtype), ds_dtype_name(din->dtype));
    if (in->dtype != DS_F32)
        DS_K->gelu16_backward(ds_half_of(in->dtype), din->data, acc, in->data, dout->data,
                              (size_t)in->numel, din16);
    else
        DS_K->gelu_backward(din->data, acc, in->data, dout->data, (size_t)in->numel);
    return 0;
}

/* input_only: backward reads the input, not the output; it writes its input gradient in
 * 16 bits where its producer's backward takes it so (c_fc's) */
static const ds_layer_ops GELU = {
    .kind = "GELU",
    .forward = gelu_forward,
    .backward = gelu_backward,
    .emits_half = ds_layer_any_half,
    .takes_half = ds_layer_any_half,
    .input_only = ds_layer_yes,
    .gives_half_grad = ds_layer_any_half,
};

ds_layer *ds_gelu_new(ds_err *err) { return ds_layer_alloc(&GELU, err); }
