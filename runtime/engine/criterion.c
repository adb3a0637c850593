#include "criterion.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "layer.h"

ds_xent *ds_xent_new(ds_err *err) {
    ds_xent *x = calloc(1, sizeof *x);
    if (!x) ds_err_set(err, "CrossEntropy: out of memory");
    return x;
}

void ds_xent_free(ds_xent *x) {
    if (!x) return;
    ds_tensor_free(x->losses);
    ds_tensor_free(x->dlogits);
    free(x);
}

void ds_xent_release(ds_xent *x) {
    x->logits = x->targets = NULL;
    ds_tensor_release(x->losses);
    ds_tensor_release(x->dlogits);
}

int ds_xent_forward(ds_xent *x, const ds_tensor *logits, const ds_tensor *targets, double *loss,
                    ds_err *err) {
    x->logits = x->targets = NULL;
    if (logits->dtype != DS_F32)
        return ds_err_set(err, "CrossEntropy: logits are %s, expected fp32", ds_dtype_name(logits->dtype));
    if (targets->dtype != DS_I32)
        return ds_err_set(err, "CrossEntropy: targets are %s, expected int32", ds_dtype_name(targets->dtype));
    int64_t V = ds_last(logits), N = ds_rows(logits);
    if (targets->numel != N)
        return ds_err_set(err, "CrossEntropy: %lld targets for %lld rows of logits",
                          (long long)targets->numel, (long long)N);
    const int32_t *t = targets->data;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        if (t[i] >= V)
            return ds_err_set(err, "CrossEntropy: target %d at position %lld is outside 0..%lld",
                              (int)t[i], (long long)i, (long long)(V - 1));
        count += t[i] >= 0;
    }
    if (ds_tensor_ensure(&x->losses, DS_F32, DS_MEM_ACTIVATIONS, 1, &N, err) != 0) return -1;
    double sum = ds_crossentropy_forward(x->losses->data, logits->data, t, (int)N, (int)V);
    x->logits = logits;
    x->targets = targets;
    x->count = count;
    *loss = count ? sum / (double)count : 0.0;
    return 0;
}

int ds_xent_backward(ds_xent *x, float scale, ds_err *err) {
    if (!x->logits) return ds_err_set(err, "CrossEntropy: backward without a forward");
    const ds_tensor *lg = x->logits;
    if (!lg->data || lg->dtype != DS_F32 || x->targets->numel != ds_rows(lg))
        return ds_err_set(err, "CrossEntropy: the logits changed since forward (run forward again)");
    if (ds_tensor_ensure(&x->dlogits, DS_F32, DS_MEM_ACTIVATIONS, lg->ndim, lg->shape, err) != 0) return -1;
    memset(x->dlogits->data, 0, ds_tensor_nbytes(x->dlogits));
    if (x->count)
        ds_crossentropy_backward(x->dlogits->data, lg->data, x->targets->data,
                                 scale / (float)x->count, (int)ds_rows(lg), (int)ds_last(lg));
    return 0;
}
