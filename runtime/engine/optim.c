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

/* Elements per chunk when the gradients are scaled on the way: p, g, m, v of a chunk
 * (4 MiB) stay in cache between the scaling and the update. */
#define SCALE_CHUNK ((size_t)1 << 18)

int ds_adamw_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c,
                         float grad_scale, ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->adam_m, s->numel, err) != 0 ||
        ensure_state(&s->adam_v, s->numel, err) != 0)
        return -1;
    float *w = s->flat_params->data, *g = s->flat_grads->data;
    float *m = s->adam_m->data, *v = s->adam_v->data;
    int scaled = grad_scale != 1.0f;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        for (size_t x = a; x < b; x += scaled ? SCALE_CHUNK : b - a) {
            size_t n = b - x < SCALE_CHUNK || !scaled ? b - x : SCALE_CHUNK;
            if (scaled) ds_scale(g + x, grad_scale, n);
            ds_adamw_update(w + x, g + x, m + x, v + x, n, c->lr, c->beta1, c->beta2, c->eps,
                            wd, c->t);
        }
    }
    return 0;
}

int ds_sgd_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, float grad_scale,
                       ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->momentum, s->numel, err) != 0)
        return -1;
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
    return ds_sumsq((const float *)s->flat_grads->data + lo, hi - lo);
}

void ds_stage_scale_grads(ds_stage *s, float k) {
    if (s->flat_grads->data) ds_scale(s->flat_grads->data, k, s->numel);
}
