/* Cross-entropy criterion on logits [..., V] and int32 targets [...]: the loss is the mean
 * over the rows whose target is >= 0 (a negative target is ignored). The gradient is
 * written over the logits (no second [N, V] buffer: 1.6 GB for GPT-2 at B = 8, T = 1024),
 * so after a backward the logits tensor holds d(loss)/d(logits) and no longer the logits.
 * Logits may be fp32, bf16 or fp16 (a 16-bit stage's head, ds_stage_half_output): the
 * softmax, the loss and its sum are fp32 from the widened logits, and d(logits) takes the
 * logits' type, one rounding per element. */
#ifndef DS_CRITERION_H
#define DS_CRITERION_H

#include "tensor.h"

typedef struct ds_xent {
    ds_tensor *losses;
    ds_tensor *logits;                 /* of the last forward; the backward writes over them */
    const ds_tensor *targets;          /* the targets on the rank's device */
    ds_tensor *targets_staged;
    int64_t count;                     /* rows that count */
    int spent;                         /* a backward ran since the forward: logits are dlogits */
} ds_xent;

ds_xent *ds_xent_new(ds_err *err);
void ds_xent_free(ds_xent *x);
int ds_xent_forward(ds_xent *x, ds_tensor *logits, const ds_tensor *targets, double *loss,
                    ds_err *err);
/* Writes scale * d(mean loss)/d(logits) over the last forward's logits and returns that
 * tensor in *dlogits; scale = 1/accumulation steps, say. Once per forward. */
int ds_xent_backward(ds_xent *x, float scale, ds_tensor **dlogits, ds_err *err);
/* ds_xent_forward then ds_xent_backward in one pass over the logits, with the same bits:
 * for a step that goes on to backward at once. The gradient is in logits afterwards. */
int ds_xent_forward_backward(ds_xent *x, ds_tensor *logits, const ds_tensor *targets,
                             float scale, double *loss, ds_err *err);
void ds_xent_release(ds_xent *x);

#endif
