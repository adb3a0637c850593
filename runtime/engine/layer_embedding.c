/* Token embedding: int32 ids [B,T] -> rows of the table [vocab, dim]. */
#include "kernels.h"
#include "layer.h"

static int embedding_forward(ds_layer *l, const ds_run *r, const ds_tensor *in, ds_err *err) {
    (void)r;
    if (in->dtype != DS_I32)
        return ds_err_set(err, "input is %s, expected int32 token ids", ds_dtype_name(in->dtype));
    if (in->ndim < 1 || in->ndim >= DS_MAX_DIMS)
        return ds_err_set(err, "token ids have %d dimensions (1..%d allowed)", in->ndim,
                          DS_MAX_DIMS - 1);
    /* Checked on the host (the ids a script gave, staged to the device as in->mirror): a
     * kernel reading past the table would not say which id was wrong. */
    const ds_tensor *h = ds_tensor_host_view(in);
    const int32_t *hid = h ? h->data : NULL;
    for (int64_t i = 0; hid && i < in->numel; i++)
        if (hid[i] < 0 || hid[i] >= l->in_dim)
            return ds_err_set(err, "token id %d at position %lld is outside the vocabulary 0..%d",
                              (int)hid[i], (long long)i, l->in_dim - 1);
    const int32_t *ids = in->data;
    int64_t shape[DS_MAX_DIMS];
    for (int i = 0; i < in->ndim; i++) shape[i] = in->shape[i];
    shape[in->ndim] = l->out_dim;
    const ds_param *w = l->param[0];
    if (ds_layer_params_half(l) && ds_layer_check_half(l, 0, err) != 0) return -1;
    if (ds_tensor_ensure_uninit(&l->out, DS_F32, DS_MEM_ACTIVATIONS, in->ndim + 1, shape, err) != 0)
        return -1;
    if (ds_layer_params_half(l))
        DS_K->embedding16_forward(ds_half_of(w->dtype), l->out->data, ids, w->half,
                                  (int)in->numel, l->out_dim);
    else
        DS_K->embedding_forward(l->out->data, ids, w->data, (int)in->numel, l->out_dim);
    return 0;
}

static int embedding_backward(ds_layer *l, const ds_run *r, const ds_tensor *in,
                              const ds_tensor *dout, ds_tensor *din, int acc, ds_err *err) {
    (void)r, (void)din, (void)acc; /* no gradient flows into ids */
    const ds_param *w = l->param[0];
    int N = (int)in->numel;
    if (!ds_layer_params_half(l)) {
        DS_K->embedding_backward(w->grad, dout->data, in->data, N, l->out_dim);
        return 0;
    }
    /* the positions grouped by id in the workspace: no fp32 copy of the table */
    if (ds_layer_check_half(l, 1, err) != 0) return -1;
    void *ws = ds_layer_workspace(ds_embedding16_workspace((size_t)N, (size_t)l->out_dim), err);
    if (!ws) return -1;
    DS_K->embedding16_backward(ds_half_of(w->dtype), w->half_grad, dout->data, in->data, N,
                               l->out_dim, ws);
    return 0;
}

/* input_only: backward reads the ids (the input) and the output gradient */
static const ds_layer_ops EMBEDDING = {
    .kind = "Embedding",
    .forward = embedding_forward,
    .backward = embedding_backward,
    .native_half = ds_layer_params_half,
    .input_only = ds_layer_yes,
};

ds_layer *ds_embedding_new(int vocab, int dim, float init_std, ds_err *err) {
    if (vocab < 1 || dim < 1)
        return ds_err_set(err, "Embedding: vocab=%d, d=%d (both must be >= 1)", vocab, dim), NULL;
    ds_layer *l = ds_layer_alloc(&EMBEDDING, err);
    if (!l) return NULL;
    l->in_dim = vocab;
    l->out_dim = dim;
    if (!ds_layer_add_param(l, "weight", 2, vocab, dim, 1, DS_INIT_NORMAL, init_std, err)) {
        ds_layer_free(l);
        return NULL;
    }
    return l;
}
