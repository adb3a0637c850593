#include "optim.h"

#include <math.h>
#include <stdlib.h>

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
    if (s->described)
        return ds_err_set(err, "stage '%s' is a description for the memory planner: nothing to "
                               "step", s->name);
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

void ds_adamw_spans_of(ds_dtype dt, void *w, const void *g, float grad_scale, float *master,
                       float *m, float *v, const ds_decay_span *spans, int nspans,
                       const ds_adamw_cfg *c) {
    if (dt == DS_F32)
        DS_K->adamw_spans(w, g, grad_scale, m, v, spans, nspans, c->lr, c->beta1, c->beta2,
                          c->eps, c->t);
    else
        DS_K->adamw_half_spans(ds_half_of(dt), w, g, grad_scale, master, m, v, spans, nspans,
                               c->lr, c->beta1, c->beta2, c->eps, c->t);
}

void ds_decay_spans_add(ds_decay_span *spans, int *count, size_t off, size_t n, float wd) {
    ds_decay_span *last = *count ? &spans[*count - 1] : NULL;
    if (last && last->off + last->n == off && last->weight_decay == wd) {
        last->n += n;
        return;
    }
    spans[(*count)++] = (ds_decay_span){off, n, wd};
}

void ds_sgd_elems(ds_dtype dt, void *w, void *g, float grad_scale, float *master, float *buf,
                  size_t n, const ds_sgd_cfg *c, float weight_decay) {
    if (dt != DS_F32) {
        DS_K->sgd_update_half(ds_half_of(dt), w, g, grad_scale, master, buf, n, c->lr,
                              c->momentum, weight_decay);
        return;
    }
    float *fw = w, *fg = g;
    int scaled = grad_scale != 1.0f;
    for (size_t x = 0; x < n; x += scaled ? SCALE_CHUNK : n) {
        size_t k = n - x < SCALE_CHUNK || !scaled ? n - x : SCALE_CHUNK;
        if (scaled) DS_K->scale(fg + x, grad_scale, k);
        DS_K->sgd_update(fw + x, fg + x, buf + x, k, c->lr, c->momentum, weight_decay);
    }
}

int ds_adamw_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c,
                         float grad_scale, ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->adam_m, s->numel, err) != 0 ||
        ensure_state(&s->adam_v, s->numel, err) != 0 || ds_stage_ensure_master(s, err) != 0)
        return -1;
    ds_decay_span *spans = malloc((size_t)(s->nparams ? s->nparams : 1) * sizeof *spans);
    if (!spans) return ds_err_set(err, "stage '%s': out of host memory for the optimizer", s->name);
    int count = 0;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        if (a < b)
            ds_decay_spans_add(spans, &count, a - lo, b - a,
                               s->params[i]->decay ? c->weight_decay : 0.0f);
    }
    float *master = s->master ? (float *)s->master->data + lo : NULL;
    ds_adamw_spans_of(s->opts.precision, ds_tensor_at(s->flat_params, lo),
                      ds_tensor_at(s->flat_grads, lo), grad_scale, master,
                      (float *)s->adam_m->data + lo, (float *)s->adam_v->data + lo, spans, count, c);
    free(spans);
    return 0;
}

int ds_sgd_step_scaled(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, float grad_scale,
                       ds_err *err) {
    if (check_range(s, lo, hi, err) != 0 || ensure_state(&s->momentum, s->numel, err) != 0 ||
        ds_stage_ensure_master(s, err) != 0)
        return -1;
    float *master = s->master ? s->master->data : NULL, *buf = s->momentum->data;
    for (int i = 0; i < s->nparams; i++) {
        size_t a, b;
        overlap(s->params[i], lo, hi, &a, &b);
        if (a >= b) continue;
        float wd = s->params[i]->decay ? c->weight_decay : 0.0f;
        ds_sgd_elems(s->opts.precision, ds_tensor_at(s->flat_params, a), ds_tensor_at(s->flat_grads, a),
                     grad_scale, master ? master + a : NULL, buf + a, b - a, c, wd);
    }
    return 0;
}

int ds_adamw_step(ds_stage *s, size_t lo, size_t hi, const ds_adamw_cfg *c, ds_err *err) {
    return ds_adamw_step_scaled(s, lo, hi, c, 1.0f, err);
}

int ds_sgd_step(ds_stage *s, size_t lo, size_t hi, const ds_sgd_cfg *c, ds_err *err) {
    return ds_sgd_step_scaled(s, lo, hi, c, 1.0f, err);
}

void ds_sumsq_of(ds_dtype dt, const void *x, size_t n, double *out) {
    if (dt == DS_F32) DS_K->sumsq(x, n, out);
    else DS_K->half_sumsq(ds_half_of(dt), x, n, out);
}

void ds_scale_of(ds_dtype dt, void *x, float k, size_t n) {
    if (dt == DS_F32) DS_K->scale(x, k, n);
    else DS_K->half_scale(ds_half_of(dt), x, k, n);
}

double ds_stage_grad_sumsq(const ds_stage *s, size_t lo, size_t hi) {
    if (hi > s->numel) hi = s->numel;
    if (lo >= hi || !s->flat_grads || !s->flat_grads->data) return 0;
    ds_err err;
    double *d = ds_device_scalars(1, &err), out = NAN;
    if (!d) return NAN;
    ds_sumsq_of(s->opts.precision, ds_tensor_at(s->flat_grads, lo), hi - lo, d);
    return ds_scalars_read(d, 1, &out, &err) == 0 ? out : NAN;
}

void ds_stage_scale_grads(ds_stage *s, float k) {
    if (s->flat_grads && s->flat_grads->data) /* none in a description */
        ds_scale_of(s->opts.precision, s->flat_grads->data, k, s->numel);
}
