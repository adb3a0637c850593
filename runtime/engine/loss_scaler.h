/* The dynamic loss scaler for fp16 mixed precision, with DeepSpeed's algorithm and
 * defaults (its DynamicLossScaler, reimplemented from the description).
 *
 * The loss is multiplied by `scale` before backward so small fp16 gradients do not
 * flush to zero. A step whose gradients overflow (sum of squares not finite) is skipped
 * and reported with update(1): after `hysteresis` overflows in a row (the last one
 * counting) the scale is divided by scale_factor, never below min_scale. After
 * scale_window clean steps since the last overflow the scale is multiplied by
 * scale_factor. The caller owns the skipping and the unscaling; this module only keeps
 * the scale. bf16 needs none of this. */
#ifndef DS_LOSS_SCALER_H
#define DS_LOSS_SCALER_H

#include <stdint.h>

#include "ds_err.h"

typedef struct ds_loss_scaler_cfg {
    double init_scale;          /* 2^16 */
    double min_scale;           /* 1 */
    double scale_factor;        /* 2 */
    int64_t scale_window;       /* 1000 clean steps before growing */
    int hysteresis;             /* 2: overflows tolerated before shrinking (delayed_shift) */
    int consecutive_hysteresis; /* 0: any clean step restores hysteresis, not only growth */
    int raise_at_min;           /* 1: overflowing at min_scale is an error */
} ds_loss_scaler_cfg;

/* What a checkpoint stores to resume the scaler exactly. */
typedef struct ds_loss_scaler_state {
    double scale;
    int64_t iter;          /* updates so far */
    int64_t last_overflow; /* iter of the last overflow, -1 if none */
    int hysteresis_left;   /* 1..cfg.hysteresis; the overflow that finds 1 shrinks the scale */
} ds_loss_scaler_state;

typedef struct ds_loss_scaler {
    ds_loss_scaler_cfg cfg;
    ds_loss_scaler_state st;
} ds_loss_scaler;

void ds_loss_scaler_defaults(ds_loss_scaler_cfg *c);
/* Validates c and starts at init_scale. */
int ds_loss_scaler_init(ds_loss_scaler *s, const ds_loss_scaler_cfg *c, ds_err *err);
/* Records one step: overflow != 0 if its gradients overflowed. Fails (state unchanged)
 * when the scale is at min_scale, it overflows again and cfg.raise_at_min is set. */
int ds_loss_scaler_update(ds_loss_scaler *s, int overflow, ds_err *err);
/* Restores a saved state after checking it fits s's configuration. */
int ds_loss_scaler_set_state(ds_loss_scaler *s, const ds_loss_scaler_state *st, ds_err *err);
/* 1 if a gradient sum of squares signals an overflow (inf or NaN). */
int ds_loss_scaler_overflow(double grad_sumsq);

#endif
