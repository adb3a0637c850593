/* Optimizers on ranges of a stage's flat buffers: [lo, hi) in elements. A whole stage is
 * [0, numel); a ZeRO shard is any sub-range. Each parameter that overlaps the range is
 * updated on the overlap, with weight decay as its flag says. A 16-bit stage's step runs
 * on its fp32 master weights (made on first use) and rounds them into the working copy. */
#ifndef DS_OPTIM_H
#define DS_OPTIM_H

#include "kernels.h" /* ds_decay_span */
#include "stage.h"

typedef struct ds_adamw_cfg {
    float lr, beta1, beta2, eps, weight_decay;
    int t; /* 1-based step, for bias correction */
} ds_adamw_cfg;

typedef struct ds_sgd_cfg {
    float lr, momentum, weight_decay;
} ds_sgd_cfg;

/* One step on n consecutive elements of a working copy w of dtype dt, with the gradients
 * g multiplied by grad_scale: fp32 updates w in place (AdamW leaves g unscaled, SGD scales
 * it in place, in cache-sized chunks just before their update); bf16/fp16 step the fp32
 * master weights and round them into w (g untouched). What a stage's step and a ZeRO
 * shard's step are made of. */
void ds_sgd_elems(ds_dtype dt, void *w, void *g, float grad_scale, float *master, float *buf,
                  size_t n, const ds_sgd_cfg *c, float weight_decay);
/* AdamW the same way over spans of w, g, master, m, v, each with its weight decay, in one
 * kernel call (one GPU launch for a stage or shard: kernels.h's ds_decay_span). */
void ds_adamw_spans_of(ds_dtype dt, void *w, const void *g, float grad_scale, float *master,
                       float *m, float *v, const ds_decay_span *spans, int nspans,
                       const ds_adamw_cfg *c);
/* Appends elements [off, off + n) with weight decay wd to spans (*count of them so far),
 * merged into the last span when it ends at off with the same decay (GPT's weight and
 * bias of one layer decay differently; a LayerNorm's weight and bias, and the next
 * layer's, do not): the caller's array holds one span per parameter at most. */
void ds_decay_spans_add(ds_decay_span *spans, int *count, size_t off, size_t n, float wd);

/* Moments live in the stage (optimizer category), made zeroed on first use. */
int ds_adamw_step(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c, ds_err *err);
int ds_sgd_step(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, ds_err *err);
/* The same on the gradients multiplied by grad_scale (clipping, loss-scale removal),
 * fused into the update's one pass: the parameters get the same bits as after
 * ds_stage_scale_grads and the step, but AdamW leaves the gradients unscaled (SGD scales
 * them in place, in cache-sized chunks just before their update). */
int ds_adamw_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c,
                         float grad_scale, ds_err *err);
int ds_sgd_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, float grad_scale,
                       ds_err *err);

/* Sum of squares (in double, fixed order; to a device double) and in-place scaling of n
 * elements in dtype dt (fp32 or 16-bit) on the rank's device: a stage's gradients, or a
 * ZeRO shard of them. */
void ds_sumsq_of(ds_dtype dt, const void *x, size_t n, double *out);
void ds_scale_of(ds_dtype dt, void *x, float k, size_t n);

/* Sum of squares of the gradients in [lo, hi), in double, fixed order, read back to the
 * host (NaN when the device failed: its error surfaces at the next sync). */
double ds_stage_grad_sumsq(const ds_stage *s, size_t lo, size_t hi);
void ds_stage_scale_grads(ds_stage *s, float k);

#endif
