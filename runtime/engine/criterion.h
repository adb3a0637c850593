/* Cross-entropy criterion on logits [..., V] and int32 targets [...]: the loss is the mean
 * over the rows whose target is >= 0 (a negative target is ignored). */
#ifndef DS_CRITERION_H
#define DS_CRITERION_H

#include "tensor.h"

typedef struct ds_xent {
    ds_tensor *losses, *dlogits;
    const ds_tensor *logits, *targets; /* of the last forward; targets as the script gave them */
    ds_tensor *targets_staged;         /* the targets on the rank's device */
    int64_t count;                     /* rows that count */
} ds_xent;

ds_xent *ds_xent_new(ds_err *err);
void ds_xent_free(ds_xent *x);
int ds_xent_forward(ds_xent *x, const ds_tensor *logits, const ds_tensor *targets, double *loss,
                    ds_err *err);
/* x->dlogits = scale * d(mean loss)/d(logits); scale = 1/accumulation steps, say. */
int ds_xent_backward(ds_xent *x, float scale, ds_err *err);
void ds_xent_release(ds_xent *x);

#endif
