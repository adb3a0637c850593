/* GELU, tanh approximation (GPT-2's). Inside a 16-bit stage it takes a 16-bit input and
 * writes a 16-bit output where its neighbours take them (ds_layer_plan_outputs): the
 * input widened into the layer workspace, the fp32 kernel run there in place (it is
 * elementwise), the result rounded once per element; backward widens the input again. */
#include "kernels.h"
#include "layer.h"
#include "layer_workspace.h"

/* the workspace of layer_workspace.h in *ws (NULL when none is needed), its parts in *io */
static int workspace(const ds_layer *l, int backward, const ds_tensor *in, void **ws,
                     ds_ws_io *io, ds_err *err) {
    *io = ds_gelu_ws(backward, (size_t)in->numel, in->dtype != DS_F32, l->out_dtype != DS_F32);
    return ds_layer_workspace_io(io, ws, err);
}

static int gelu_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (ds_check_input(l, in, -1, err) != 0) return -1;
    ds_ws_io io;
    void *ws;
    /* the workspace before out: the planner's order */
    if (workspace(l, 0, in, &ws, &io, err) != 0 || ds_out_like(l, in, ds_last(in), err) != 0)
        return -1;
    const float *x = ds_in_f32(in, ds_ws_at(ws, io.in));
    float *y = ds_out_f32(l, ds_ws_at(ws, io.out));
    DS_K->gelu_forward(y, x, (size_t)in->numel);
    ds_out_round(l, y);
    return 0;
}

static int gelu_backward(ds_layer *l, const ds_run *r, const ds_tensor *in, const ds_tensor *dout,
                         ds_tensor *din, ds_err *err) {
    (void)r;
    ds_ws_io io;
    void *ws;
    if (workspace(l, 1, in, &ws, &io, err) != 0) return -1;
    if (din) DS_K->gelu_backward(din->data, ds_in_f32(in, ds_ws_at(ws, io.in)), dout->data,
                                 (size_t)in->numel);
    return 0;
}

static const ds_layer_ops GELU = {"GELU", gelu_forward, gelu_backward, NULL, ds_layer_any_half,
                                  ds_layer_any_half};

ds_layer *ds_gelu_new(ds_err *err) { return ds_layer_alloc(&GELU, err); }
