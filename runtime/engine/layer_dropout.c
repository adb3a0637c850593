/* Dropout with a counter-based mask keyed by (seed, step, layer, micro-batch): backward
 * and a checkpoint recomputation redraw the same mask instead of saving it. Elements are
 * counted from the input's global first row (r->row0), so a data-parallel rank draws the
 * single-rank run's mask for its rows. In evaluation, or with p = 0, the layer passes
 * its input through untouched. Active at the end of a Residual's branch, it computes the
 * Residual's sum itself (forward_add: x + dropout(in), one kernel, no mask buffer). */
#include "kernels.h"
#include "layer.h"

static ds_rng_key key_of(const ds_layer *l, const ds_run *r, const ds_tensor *in) {
    uint64_t per_row = in->ndim && in->shape[0] ? (uint64_t)in->numel / (uint64_t)in->shape[0] : 0;
    return ds_run_key(l, r, per_row);
}

static int active(const ds_layer *l, const ds_run *r) { return r->train && l->p > 0; }

/* l->out is either the input (inactive) or buf[MASKED], never a struct freed while a
 * script may still hold it. */
enum { MASKED };

static int dropout_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    if (in->dtype != DS_F32) return ds_err_set(err, "input is %s, expected fp32", ds_dtype_name(in->dtype));
    l->out_borrowed = 1;
    if (!active(l, r)) {
        l->out = (ds_tensor *)in;
        return 0;
    }
    if (ds_tensor_ensure_uninit(&l->buf[MASKED], DS_F32, DS_MEM_ACTIVATIONS, in->ndim, in->shape, err) != 0)
        return -1;
    l->out = l->buf[MASKED];
    DS_K->dropout_forward(l->out->data, in->data, (size_t)in->numel, l->p, key_of(l, r, in));
    return 0;
}

static int dropout_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                            const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    (void)err;
    if (!din) return 0;
    if (!active(l, r))
        ds_grad_through(din, acc, dout);
    else
        DS_K->dropout_backward(din->data, acc, dout->data, (size_t)in->numel, l->p,
                               key_of(l, r, in));
    return 0;
}

/* Forward borrows its input exactly when inactive: backward's gradient is then dout. */
static int passes_through(const ds_layer *l, const ds_run *r) { return !active(l, r); }

/* Active, ending a Residual's branch: out = x + dropout(in) in one kernel, no
 * buf[MASKED]. l->out borrows the input, as when inactive: its shape is the output's
 * for the shape checks of the Sequentials that pass it on, and no reader needs the
 * masked values (backward draws the mask again, the Residual has its sum); buf[MASKED]
 * loses its storage so a layer that ran unfused before holds none. out NULL: the sum is
 * a checkpoint span's kept one, only l->out is set up for backward (no kernel). */
static int dropout_forward_add(ds_layer *l, const ds_run *r, const ds_tensor *in,
                               const ds_tensor *x, ds_tensor *out, ds_err *err) {
    if (in->dtype != DS_F32 || !ds_tensor_same_shape(in, x))
        return ds_err_set(err, "the residual branch changes the shape or type of its input");
    ds_tensor_release(l->buf[MASKED]);
    l->out_borrowed = 1;
    l->out = (ds_tensor *)in;
    if (out)
        DS_K->dropout_add_forward(out->data, x->data, in->data, (size_t)in->numel, l->p,
                                  key_of(l, r, in));
    return 0;
}

/* input_only: no. Backward needs nothing of the forward (the mask comes again from the
 * run's keys), but the output is the input or the mask buffer, no tensor of its own a
 * checkpoint span could keep past the span's release. */
static const ds_layer_ops DROPOUT = {
    .kind = "Dropout",
    .forward = dropout_forward,
    .backward = dropout_backward,
    .passes_through = passes_through,
    .fuses_into_add = active,
    .forward_add = dropout_forward_add,
};

ds_layer *ds_dropout_new(float p, ds_err *err) {
    if (!(p >= 0 && p < 1)) return ds_err_set(err, "Dropout: p=%g (0 <= p < 1)", (double)p), NULL;
    ds_layer *l = ds_layer_alloc(&DROPOUT, err);
    if (l) l->p = p;
    return l;
}
