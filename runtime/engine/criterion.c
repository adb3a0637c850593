#include "criterion.h"

#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "layer.h"
#include "tensor_half.h"

static int is_half(ds_dtype t) { return t == DS_BF16 || t == DS_F16; }

ds_xent *ds_xent_new(ds_err *err) {
    ds_xent *x = calloc(1, sizeof *x);
    if (!x) ds_err_set(err, "CrossEntropy: out of memory");
    return x;
}

void ds_xent_free(ds_xent *x) {
    if (!x) return;
    ds_tensor_free(x->losses);
    ds_tensor_free(x->targets_staged);
    free(x);
}

void ds_xent_release(ds_xent *x) {
    x->logits = NULL;
    x->targets = NULL;
    ds_tensor_release(x->losses);
    ds_tensor_release(x->targets_staged);
}

/* Checks the inputs, counts the rows that count and stages the targets; on success the
 * criterion holds both for the kernel. */
static int take_inputs(ds_xent *x, ds_tensor *logits, const ds_tensor *targets, ds_err *err) {
    x->logits = NULL;
    x->targets = NULL;
    x->spent = 0;
    if (logits->dtype != DS_F32 && !is_half(logits->dtype))
        return ds_err_set(err, "CrossEntropy: logits are %s, expected fp32, bf16 or fp16",
                          ds_dtype_name(logits->dtype));
    if (targets->dtype != DS_I32)
        return ds_err_set(err, "CrossEntropy: targets are %s, expected int32", ds_dtype_name(targets->dtype));
    int64_t V = ds_last(logits), N = ds_rows(logits);
    if (targets->numel != N)
        return ds_err_set(err, "CrossEntropy: %lld targets for %lld rows of logits",
                          (long long)targets->numel, (long long)N);
    /* Checked and counted on the host, where the script's targets are. */
    const ds_tensor *h = ds_tensor_host_view(targets);
    if (!h) return ds_err_set(err, "CrossEntropy: targets must be a host tensor (a script's)");
    const int32_t *t = h->data;
    int64_t count = 0;
    for (int64_t i = 0; i < N; i++) {
        if (t[i] >= V)
            return ds_err_set(err, "CrossEntropy: target %d at position %lld is outside 0..%lld",
                              (int)t[i], (long long)i, (long long)(V - 1));
        count += t[i] >= 0;
    }
    const ds_tensor *td = ds_tensor_stage(&x->targets_staged, targets, DS_MEM_DATA, err);
    if (!td || ds_tensor_ensure_uninit(&x->losses, DS_F32, DS_MEM_ACTIVATIONS, 1, &N, err) != 0)
        return ds_err_prefix(err, "CrossEntropy");
    x->logits = logits;
    x->targets = td;
    x->count = count;
    return 0;
}

static float dloss_of(const ds_xent *x, float scale) {
    return x->count ? scale / (float)x->count : 0.0f; /* no row counts: all rows get zeros */
}

static int read_loss(ds_xent *x, double *dsum, double *loss, ds_err *err) {
    double sum = 0;
    if (ds_scalars_read(dsum, 1, &sum, err) != 0) {
        x->logits = NULL;
        return ds_err_prefix(err, "CrossEntropy");
    }
    *loss = x->count ? sum / (double)x->count : 0.0;
    return 0;
}

/* The kernel over x's logits: forward (dloss unused, no gradient), backward (no losses,
 * no sum) or both; 16-bit logits through crossentropy16 (fp32 statistics and loss, the
 * gradient rounded once per element into the logits). */
enum { XENT_FWD = 1, XENT_BWD = 2 };
static void run_kernel(const ds_xent *x, int what, float dloss, double *dsum) {
    ds_tensor *lg = x->logits;
    int N = (int)ds_rows(lg), V = (int)ds_last(lg);
    float *losses = what & XENT_FWD ? x->losses->data : NULL;
    if (is_half(lg->dtype)) {
        DS_K->crossentropy16(ds_half_of(lg->dtype), losses, what & XENT_BWD ? lg->data : NULL,
                             lg->data, x->targets->data, dloss, N, V,
                             what & XENT_FWD ? dsum : NULL);
    } else if (what == XENT_FWD) {
        DS_K->crossentropy_forward(losses, lg->data, x->targets->data, N, V, dsum);
    } else if (what == XENT_BWD) {
        DS_K->crossentropy_backward(lg->data, lg->data, x->targets->data, dloss, N, V);
    } else {
        DS_K->crossentropy_forward_backward(losses, lg->data, lg->data, x->targets->data, dloss,
                                            N, V, dsum);
    }
}

int ds_xent_forward(ds_xent *x, ds_tensor *logits, const ds_tensor *targets, double *loss,
                    ds_err *err) {
    if (take_inputs(x, logits, targets, err) != 0) return -1;
    double *dsum = ds_device_scalars(1, err);
    if (!dsum) return -1;
    run_kernel(x, XENT_FWD, 0.0f, dsum);
    return read_loss(x, dsum, loss, err);
}

int ds_xent_forward_backward(ds_xent *x, ds_tensor *logits, const ds_tensor *targets,
                             float scale, double *loss, ds_err *err) {
    if (take_inputs(x, logits, targets, err) != 0) return -1;
    double *dsum = ds_device_scalars(1, err);
    if (!dsum) return -1;
    run_kernel(x, XENT_FWD | XENT_BWD, dloss_of(x, scale), dsum);
    x->spent = 1;
    return read_loss(x, dsum, loss, err);
}

int ds_xent_backward(ds_xent *x, float scale, ds_tensor **dlogits, ds_err *err) {
    if (!x->logits) return ds_err_set(err, "CrossEntropy: backward without a forward");
    if (x->spent)
        return ds_err_set(err, "CrossEntropy: backward ran already: the logits hold its gradient "
                               "now (run forward again)");
    ds_tensor *lg = x->logits;
    if (!lg->data || (lg->dtype != DS_F32 && !is_half(lg->dtype)) ||
        x->targets->numel != ds_rows(lg))
        return ds_err_set(err, "CrossEntropy: the logits changed since forward (run forward again)");
    run_kernel(x, XENT_BWD, dloss_of(x, scale), NULL);
    x->spent = 1;
    *dlogits = lg;
    return 0;
}
