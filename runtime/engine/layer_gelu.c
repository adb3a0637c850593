/* GELU, tanh approximation (GPT-2's). */
#include "kernels.h"
#include "layer.h"

static int gelu_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (in->dtype != DS_F32) return ds_err_set(err, "input is %s, expected fp32", ds_dtype_name(in->dtype));
    if (ds_out_like(l, in, ds_last(in), err) != 0) return -1;
    DS_K->gelu_forward(l->out->data, in->data, (size_t)in->numel);
    return 0;
}

static int gelu_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                         ds_tensor *din, ds_err *err) {
    (void)l; (void)r; (void)err;
    if (din) DS_K->gelu_backward(din->data, in->data, dout->data, (size_t)in->numel);
    return 0;
}

static const ds_layer_ops GELU = {"GELU", gelu_forward, gelu_backward, NULL};

ds_layer *ds_gelu_new(ds_err *err) { return ds_layer_alloc(&GELU, err); }
