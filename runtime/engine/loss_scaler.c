/* DeepSpeed's dynamic loss scaling: shrink after `hysteresis` overflows, grow once
 * `scale_window` clean steps have passed since the last overflow (or the start). See
 * loss_scaler.h. The growth timing is current DeepSpeed's DynamicLossScaler.update_scale
 * (the `stable_interval` rule), one step later than its older versions. */
#include "loss_scaler.h"

#include <math.h>

void ds_loss_scaler_defaults(ds_loss_scaler_cfg *c) {
    *c = (ds_loss_scaler_cfg){
        .init_scale = 65536.0,
        .min_scale = 1.0,
        .scale_factor = 2.0,
        .scale_window = 1000,
        .hysteresis = 2,
        .consecutive_hysteresis = 0,
        .raise_at_min = 1,
    };
}

/* Comparisons are written so NaN fails them. */
static int check_cfg(const ds_loss_scaler_cfg *c, ds_err *err) {
    if (!(c->init_scale > 0) || !isfinite(c->init_scale))
        return ds_err_set(err, "loss scaler: init_scale = %g must be a finite number > 0", c->init_scale);
    if (!(c->min_scale > 0))
        return ds_err_set(err, "loss scaler: min_scale = %g must be > 0", c->min_scale);
    if (!(c->min_scale <= c->init_scale))
        return ds_err_set(err, "loss scaler: min_scale = %g is above init_scale = %g", c->min_scale,
                          c->init_scale);
    if (c->scale_window < 1)
        return ds_err_set(err, "loss scaler: scale_window = %lld must be >= 1",
                          (long long)c->scale_window);
    if (c->hysteresis < 1)
        return ds_err_set(err, "loss scaler: hysteresis = %d must be >= 1", c->hysteresis);
    /* An infinite factor would turn the first growth into an inf scale. */
    if (!(c->scale_factor > 1) || !isfinite(c->scale_factor))
        return ds_err_set(err, "loss scaler: scale_factor = %g must be a finite number > 1",
                          c->scale_factor);
    return 0;
}

int ds_loss_scaler_init(ds_loss_scaler *s, const ds_loss_scaler_cfg *c, ds_err *err) {
    if (check_cfg(c, err) != 0) return -1;
    s->cfg = *c;
    s->st = (ds_loss_scaler_state){c->init_scale, 0, -1, c->hysteresis};
    return 0;
}

static int on_overflow(ds_loss_scaler *s, ds_err *err) {
    const ds_loss_scaler_cfg *c = &s->cfg;
    ds_loss_scaler_state *st = &s->st;
    if (c->hysteresis == 1 || st->hysteresis_left == 1) {
        if (st->scale == c->min_scale && c->raise_at_min)
            return ds_err_set(err, "loss scale already at its minimum %g and the gradients still "
                                   "overflow (step %lld)", c->min_scale, (long long)st->iter);
        st->scale = fmax(st->scale / c->scale_factor, c->min_scale);
    } else {
        st->hysteresis_left--;
    }
    st->last_overflow = st->iter;
    return 0;
}

static void on_clean(ds_loss_scaler *s) {
    const ds_loss_scaler_cfg *c = &s->cfg;
    ds_loss_scaler_state *st = &s->st;
    if (c->consecutive_hysteresis) st->hysteresis_left = c->hysteresis;
    /* stable = clean steps before this one since the last overflow. It must be a
     * positive multiple of the window: the scale grows on the (window + 1)-th clean
     * step after an overflow or the start (last_overflow = -1), then every window. */
    int64_t stable = st->iter - st->last_overflow - 1;
    if (stable > 0 && stable % c->scale_window == 0) {
        if (!c->consecutive_hysteresis) st->hysteresis_left = c->hysteresis;
        st->scale *= c->scale_factor;
    }
}

int ds_loss_scaler_update(ds_loss_scaler *s, int overflow, ds_err *err) {
    if (overflow) {
        if (on_overflow(s, err) != 0) return -1;
    } else {
        on_clean(s);
    }
    s->st.iter++;
    return 0;
}

int ds_loss_scaler_set_state(ds_loss_scaler *s, const ds_loss_scaler_state *st, ds_err *err) {
    const ds_loss_scaler_cfg *c = &s->cfg;
    if (!(st->scale >= c->min_scale) || !isfinite(st->scale))
        return ds_err_set(err, "loss scaler state: scale = %g must be finite and >= min_scale = %g",
                          st->scale, c->min_scale);
    if (st->iter < 0)
        return ds_err_set(err, "loss scaler state: iter = %lld must be >= 0", (long long)st->iter);
    /* An overflow is recorded at the iter it happened, then iter moves on. */
    if (st->last_overflow < -1 || st->last_overflow >= st->iter)
        return ds_err_set(err, "loss scaler state: last_overflow = %lld must be in -1..iter-1 = %lld",
                          (long long)st->last_overflow, (long long)st->iter - 1);
    if (st->hysteresis_left < 1 || st->hysteresis_left > c->hysteresis)
        return ds_err_set(err, "loss scaler state: hysteresis = %d must be in 1..%d",
                          st->hysteresis_left, c->hysteresis);
    s->st = *st;
    return 0;
}

int ds_loss_scaler_overflow(double grad_sumsq) { return !isfinite(grad_sumsq); }
