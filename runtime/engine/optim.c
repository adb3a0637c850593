#include "optim.h"

#include "kernels.h"

static int ensure_state(ds_tensor **t, size_t n, ds_err *err) {
    if (*t) return 0;
    int64_t len = (int64_t)n;
    *t = ds_tensor_new(DS_F32, DS_MEM_OPTIMIZER, 1, &len, err);
    return *t ? 0 : -1;
}

static int check_range(const ds_stage *s, size_t lo, size_t hi, ds_err *err) {
    if (lo > hi || hi > s->numel)
        return ds_err_set(err, "stage '%s': range [%zu, %zu) outside its flat buffer of %zu",
                          s->name, lo, hi, s->numel);
    if (!s->flat_params->data || !s->flat_grads->data)
        return ds_err_set(err, "stage '%s': its parameters or gradients are not resident "
                               "(released by ZeRO)", s->name);
    return 0;
}

/* The overlap of parameter p with [lo, hi): [*a, *b), empty when *a >= *b. */
static void overlap(const ds_param *p, size_t lo, size_t hi, size_t *a, size_t *b) {
    *a = p->offset > lo ? p->offset : lo;
    size_t end = p->offset + p->numel;
    *b = end < hi ? end : hi;
}

/* SGD: elements per chunk when the gradients are scaled on the way: p, g, buf of a chunk
 * (3 MiB) stay in cache between the scaling and the update. */
#define SCALE_CHUNK ((size_t)1 << 18)

/* 16-bit stages: the step runs on the fp32 masters, the gradients widened on the way. */
static int adamw_half(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c,
                      float grad_scale, ds_err *err) {
    if (ds_stage_sync_master(s, 0, err) != 0) return -1;
    ds_half h = ds_half_of(s->opts.precision);
    uint16_t *w = s->flat_params->data, *g = s->flat_grads->data;
    float *master = s->master->data, *m = s->adam_m->data, *v = s->adam_v->data;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        if (a >= b) continue;
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        ds_adamw_update_half(h, w + a, g + a, grad_scale, master + a, m + a, v + a, b - a,
                             c->lr, c->beta1, c->beta2, c->eps, wd, c->t);
    }
    return 0;
}

static int sgd_half(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, float grad_scale,
                    ds_err *err) {
    if (ds_stage_sync_master(s, 0, err) != 0) return -1;
    ds_half h = ds_half_of(s->opts.precision);
    uint16_t *w = s->flat_params->data, *g = s->flat_grads->data;
    float *master = s->master->data, *buf = s->momentum->data;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        if (a >= b) continue;
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        ds_sgd_update_half(h, w + a, g + a, grad_scale, master + a, buf + a, b - a, c->lr,
                           c->momentum, wd);
    }
    return 0;
}

int ds_adamw_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c,
                         float grad_scale, ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->adam_m, s->numel, err) != 0 ||
        ensure_state(&s->adam_v, s->numel, err) != 0)
        return -1;
    if (ds_stage_is_half(s)) return adamw_half(s, lo, hi, c, grad_scale, err);
    float *w = s->flat_params->data, *g = s->flat_grads->data;
    float *m = s->adam_m->data, *v = s->adam_v->data;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        if (a >= b) continue;
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        ds_adamw_update_scaled(w + a, g + a, grad_scale, m + a, v + a, b - a, c->lr, c->beta1,
                               c->beta2, c->eps, wd, c->t);
    }
    return 0;
}

int ds_sgd_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, float grad_scale,
                       ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->momentum, s->numel, err) != 0)
        return -1;
    if (ds_stage_is_half(s)) return sgd_half(s, lo, hi, c, grad_scale, err);
    float *w = s->flat_params->data, *g = s->flat_grads->data, *buf = s->momentum->data;
    int scaled = grad_scale != 1.0f;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        for (size_t x = a; x < b; x += scaled ? SCALE_CHUNK : b - a) {
            size_t n = b - x < SCALE_CHUNK || !scaled ? b - x : SCALE_CHUNK;
            if (scaled) ds_scale(g + x, grad_scale, n);
            ds_sgd_update(w + x, g + x, buf + x, n, c->lr, c->momentum, wd);
        }
    }
    return 0;
}

int ds_adamw_step(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c, ds_err *err) {
    return ds_adamw_step_scaled(s, lo, hi, c, 1.0f, err);
}

int ds_sgd_step(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, ds_err *err) {
    return ds_sgd_step_scaled(s, lo, hi, c, 1.0f, err);
}

double ds_stage_grad_sumsq(const ds_stage *s, size_t lo, size_t hi) {
    if (hi > s->numel) hi = s->numel;
    if (lo >= hi || !s->flat_grads->data) return 0;
    if (ds_stage_is_half(s))
        return ds_half_sumsq(ds_half_of(s->opts.precision), (const uint16_t *)s->flat_grads->data + lo, hi - lo);
    return ds_sumsq((const float *)s->flat_grads->data + lo, hi - lo);
}

void ds_stage_scale_grads(ds_stage *s, float k) {
    if (!s->flat_grads->data) return;
    if (ds_stage_is_half(s)) ds_half_scale(ds_half_of(s->opts.precision), s->flat_grads->data, k, s->numel);
    else ds_scale(s->flat_grads->data, k, s->numel);
}
