#include "stage.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static uint32_t fnv1a(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

/* Names: parameters take the dotted chain of named layers ("h.0.attn.c_attn.weight");
 * paths add child indices for anonymous layers and the stage name, so every layer has a
 * unique RNG id. Done before checkpoint wrapping: checkpointing changes no mask. */
static int assign_names(ds_layer *l, const char *prefix, const char *path, ds_err *err) {
    snprintf(l->path, sizeof l->path, "%s", path);
    l->rng_id = fnv1a(path);
    for (int i = 0; i < l->nparam; i++) {
        if (l->tied[i]) continue;
        char full[sizeof l->param[i]->name];
        int n = snprintf(full, sizeof full, "%s%s%s", prefix, prefix[0] ? "." : "",
                         l->param[i]->name);
        if (n >= (int)sizeof full) return ds_err_set(err, "parameter name too long: %s", full);
        memcpy(l->param[i]->name, full, sizeof full);
    }
    for (int i = 0; i < l->nchild; i++) {
        ds_layer *c = l->child[i];
        char cprefix[160], cpath[192];
        if (c->name[0])
            snprintf(cprefix, sizeof cprefix, "%s%s%s", prefix, prefix[0] ? "." : "", c->name);
        else
            snprintf(cprefix, sizeof cprefix, "%s", prefix);
        if (c->name[0]) snprintf(cpath, sizeof cpath, "%s.%s", path, c->name);
        else snprintf(cpath, sizeof cpath, "%s.%d", path, i);
        if (assign_names(c, cprefix, cpath, err) != 0) return -1;
    }
    return 0;
}

static int collect_params(ds_stage *s, ds_layer *l, ds_err *err) {
    for (int i = 0; i < l->nparam; i++) {
        if (l->tied[i]) continue;
        ds_param **p = realloc(s->params, (size_t)(s->nparams + 1) * sizeof *p);
        if (!p) return ds_err_set(err, "out of memory");
        s->params = p;
        s->params[s->nparams++] = l->param[i];
    }
    for (int i = 0; i < l->nchild; i++)
        if (collect_params(s, l->child[i], err) != 0) return -1;
    return 0;
}

static int check_unique_names(const ds_stage *s, ds_err *err) {
    for (int i = 0; i < s->nparams; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(s->params[i]->name, s->params[j]->name))
                return ds_err_set(err, "two parameters are named '%s': name the layers apart",
                                  s->params[i]->name);
    return 0;
}

void ds_param_init(const ds_param *p, uint64_t seed, float *out) {
    switch (p->init) {
    case DS_INIT_ZEROS: memset(out, 0, p->numel * sizeof(float)); return;
    case DS_INIT_ONES:
        for (size_t i = 0; i < p->numel; i++) out[i] = 1.0f;
        return;
    case DS_INIT_NORMAL: break;
    }
    /* Box-Muller on Philox draws keyed by (seed, name): two normals per counter. */
    /* Each pair depends only on its index: the loop may run in any order or split. */
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32) ^ fnv1a(p->name)};
    int64_t pairs = (int64_t)((p->numel + 1) / 2);
#pragma omp parallel for schedule(static) if (pairs > 65536)
    for (int64_t k = 0; k < pairs; k++) {
        size_t i = (size_t)k * 2;
        uint32_t ctr[4] = {(uint32_t)(i / 2), (uint32_t)((uint64_t)(i / 2) >> 32), 0x494e4954u, 0};
        uint32_t r[4];
        ds_philox4x32(r, ctr, key);
        double u1 = ((double)r[0] + 0.5) / 4294967296.0, u2 = ((double)r[1] + 0.5) / 4294967296.0;
        double rad = sqrt(-2.0 * log(u1)), th = 2.0 * M_PI * u2;
        out[i] = (float)(p->std * rad * cos(th));
        if (i + 1 < p->numel) out[i + 1] = (float)(p->std * rad * sin(th));
    }
}

void ds_stage_bind_params(ds_stage *s) {
    char *w = s->flat_params ? s->flat_params->data : NULL;
    char *g = s->flat_grads ? s->flat_grads->data : NULL;
    size_t esize = ds_dtype_size(s->opts.precision);
    for (int i = 0; i < s->nparams; i++) {
        ds_param *p = s->params[i];
        void *pw = w ? w + p->offset * esize : NULL, *pg = g ? g + p->offset * esize : NULL;
        p->dtype = s->opts.precision;
        if (p->dtype == DS_F32) {
            p->data = pw;
            p->grad = pg;
        } else {
            p->half = pw;
            p->half_grad = pg;
        }
    }
}

/* Each parameter is drawn on the host in fp32 (a 16-bit stage then rounds it there: the
 * working copy is the fp32 model rounded, whatever the precision) and copied into its
 * slice of the flat buffer on the rank's device. */
static int init_params(ds_stage *s, ds_err *err) {
    for (int i = 0; i < s->nparams; i++) {
        ds_param *p = s->params[i];
        size_t bytes = p->numel * sizeof(float);
        float *host = ds_alloc_host(bytes, DS_MEM_WORKSPACE, err);
        if (!host) return ds_err_prefix(err, "initialising '%s'", p->name);
        ds_param_init(p, s->seed, host);
        void *values = host;
        if (p->dtype != DS_F32) { /* the rounded copy: host staging, not model memory */
            if (!(values = malloc(p->numel * sizeof(uint16_t)))) {
                ds_free_host(host, bytes, DS_MEM_WORKSPACE);
                return ds_err_set(err, "out of memory initialising '%s'", p->name);
            }
            ds_half_from_f32(ds_half_of(p->dtype), values, host, p->numel);
        }
        int rc = ds_tensor_from_host(s->flat_params, p->offset, p->numel, values, err);
        if (values != host) free(values);
        ds_free_host(host, bytes, DS_MEM_WORKSPACE);
        if (rc != 0) return ds_err_prefix(err, "initialising '%s'", p->name);
    }
    return 0;
}

/* Offsets in the flat buffer and its length; the owner of every parameter. */
static void lay_out(ds_stage *s) {
    size_t off = 0;
    for (int i = 0; i < s->nparams; i++) {
        s->params[i]->offset = off;
        s->params[i]->owner = s;
        off += (s->params[i]->numel + DS_PARAM_ALIGN - 1) / DS_PARAM_ALIGN * DS_PARAM_ALIGN;
    }
    s->numel = off;
}

static int allocate(ds_stage *s, ds_err *err) {
    int64_t n = (int64_t)(s->numel ? s->numel : DS_PARAM_ALIGN);
    if (!(s->flat_params = ds_tensor_new(s->opts.precision, DS_MEM_PARAMS, 1, &n, err)) ||
        !(s->flat_grads = ds_tensor_new(s->opts.precision, DS_MEM_GRADS, 1, &n, err)))
        return -1;
    ds_stage_bind_params(s);
    return init_params(s, err);
}

static int refuse_description(const ds_stage *s, const char *what, ds_err *err) {
    return ds_err_set(err, "stage '%s' %s: it is a description for the memory planner (no "
                           "buffers)", s->name, what);
}

static int master_from_params(ds_stage *s, ds_err *err) {
    if (s->described) return refuse_description(s, "master weights", err);
    if (!s->flat_params->data)
        return ds_err_set(err, "stage '%s': no resident working copy to make master weights from",
                          s->name);
    int64_t n = (int64_t)s->numel;
    if (!s->master && !(s->master = ds_tensor_new(DS_F32, DS_MEM_OPTIMIZER, 1, &n, err)))
        return ds_err_prefix(err, "stage '%s': master weights", s->name);
    DS_K->half_to_f32(ds_half_of(s->opts.precision), s->master->data, s->flat_params->data,
                      s->numel);
    return 0;
}

int ds_stage_ensure_master(ds_stage *s, ds_err *err) {
    return ds_stage_is_half(s) && !s->master ? master_from_params(s, err) : 0;
}

int ds_stage_refresh_master(ds_stage *s, ds_err *err) {
    return ds_stage_is_half(s) && s->master ? master_from_params(s, err) : 0;
}

/* Wraps spans of `every` consecutive layers in checkpoint containers. */
static int insert_checkpoints(ds_stage *s, ds_layer **layers, int n, ds_err *err) {
    int every = s->opts.checkpoint;
    for (int i = 0; i < n; i += every) {
        int m = n - i < every ? n - i : every;
        ds_layer *span = layers[i];
        if (m > 1) {
            if (!(span = ds_sequential_new(err))) return -1;
            for (int j = 0; j < m; j++) {
                if (ds_layer_add_child(span, layers[i + j], err) != 0) return -1;
                layers[i + j] = NULL; /* owned by span now */
            }
        } else {
            layers[i] = NULL;
        }
        ds_layer *ck = ds_checkpoint_new(span, err);
        if (!ck) {
            ds_layer_free(span);
            return -1;
        }
        if (ds_layer_add_child(s->root, ck, err) != 0) {
            ds_layer_free(ck);
            return -1;
        }
    }
    return 0;
}

static int add_layers(ds_stage *s, ds_layer **layers, int n, ds_err *err) {
    if (!(s->layers = malloc((size_t)n * sizeof *s->layers))) return ds_err_set(err, "out of memory");
    memcpy(s->layers, layers, (size_t)n * sizeof *layers);
    s->nlayers = n;
    if (s->opts.checkpoint > 0 && !s->described) return insert_checkpoints(s, layers, n, err);
    for (int i = 0; i < n; i++) {
        if (ds_layer_add_child(s->root, layers[i], err) != 0) return -1;
        layers[i] = NULL;
    }
    return 0;
}

static ds_stage *build(const char *name, ds_layer **layers, int n, const ds_stage_opts *opts,
                       uint64_t seed, int described, ds_err *err) {
    ds_stage *s = calloc(1, sizeof *s);
    if (!s) {
        ds_err_set(err, "stage: out of memory");
        goto fail_layers;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->opts = *opts;
    s->described = described;
    if (opts->precision != DS_F32 && opts->precision != DS_BF16 && opts->precision != DS_F16) {
        ds_err_set(err, "precision %s (fp32, bf16 or fp16)", ds_dtype_name(opts->precision));
        goto fail;
    }
    s->seed = seed;
    if (!(s->root = ds_sequential_new(err))) goto fail;
    /* Names first, on the layers as the script built them. */
    for (int i = 0; i < n; i++) {
        char path[192];
        if (layers[i]->name[0]) snprintf(path, sizeof path, "%s/%s", name, layers[i]->name);
        else snprintf(path, sizeof path, "%s/%d", name, i);
        if (assign_names(layers[i], layers[i]->name, path, err) != 0) goto fail;
    }
    for (int i = 0; i < n; i++)
        if (collect_params(s, layers[i], err) != 0) goto fail;
    if (check_unique_names(s, err) != 0 || add_layers(s, layers, n, err) != 0) goto fail;
    lay_out(s);
    if (!described && allocate(s, err) != 0) goto fail;
    return s;
fail:
    ds_stage_free(s);
fail_layers:
    for (int i = 0; i < n; i++) ds_layer_free(layers[i]);
    ds_err_prefix(err, "stage '%s'", name);
    return NULL;
}

ds_stage *ds_stage_new(const char *name, ds_layer **layers, int n, const ds_stage_opts *opts,
                       uint64_t seed, ds_err *err) {
    return build(name, layers, n, opts, seed, 0, err);
}

ds_stage *ds_stage_describe(const char *name, ds_layer **layers, int n, const ds_stage_opts *opts,
                            uint64_t seed, ds_err *err) {
    return build(name, layers, n, opts, seed, 1, err);
}

void ds_stage_free(ds_stage *s) {
    if (!s) return;
    ds_layer_free(s->root);
    free(s->layers);
    free(s->params);
    ds_tensor_free(s->flat_params);
    ds_tensor_free(s->flat_grads);
    ds_tensor_free(s->adam_m);
    ds_tensor_free(s->adam_v);
    ds_tensor_free(s->momentum);
    ds_tensor_free(s->master);
    ds_tensor_free(s->grad_in);
    ds_tensor_free(s->in_staged);
    ds_tensor_free(s->dout_staged);
    free(s);
}

int ds_stage_forward(ds_stage *s, const ds_tensor *in, const ds_run *r, ds_err *err) {
    if (s->described) return refuse_description(s, "forward", err);
    s->last_in = NULL;
    s->run = *r;
    if (!(in = ds_tensor_stage(&s->in_staged, in, DS_MEM_DATA, err)))
        return ds_err_prefix(err, "stage '%s' forward: input", s->name);
    /* Again each forward (a walk of the tree): a weight tied to a stage built after this
     * one has its format only once that stage exists. */
    ds_layer_plan_outputs(s->root, s->opts.precision);
    if (s->half_output) ds_layer_plan_last(s->root, s->opts.precision);
    if (ds_layer_forward(s->root, r, in, err) != 0)
        return ds_err_prefix(err, "stage '%s' forward", s->name);
    s->last_in = in;
    return 0;
}

int ds_stage_backward(ds_stage *s, const ds_tensor *dout, ds_err *err) {
    if (s->described) return refuse_description(s, "backward", err);
    if (!s->last_in)
        return ds_err_set(err, "stage '%s' backward: no forward to go back through", s->name);
    /* a 16-bit gradient only in the 16-bit output's own format: the one layer that ends
     * a stage in 16 bits (ds_layer_plan_last) takes it, no other layer reads 16 bits */
    const ds_tensor *out = ds_stage_output(s);
    if (dout->dtype != DS_F32 && !(out && dout->dtype == out->dtype))
        return ds_err_set(err, "stage '%s' backward: gradient is %s, expected fp32%s%s", s->name,
                          ds_dtype_name(dout->dtype), out && out->dtype != DS_F32 ? " or " : "",
                          out && out->dtype != DS_F32 ? ds_dtype_name(out->dtype) : "");
    if (!(dout = ds_tensor_stage(&s->dout_staged, dout, DS_MEM_ACTIVATIONS, err)))
        return ds_err_prefix(err, "stage '%s' backward: gradient", s->name);
    const ds_tensor *in = s->last_in;
    ds_tensor *din = NULL;
    if (in->dtype == DS_F32) {
        if (ds_tensor_ensure_uninit(&s->grad_in, DS_F32, DS_MEM_ACTIVATIONS, in->ndim,
                                    in->shape, err) != 0)
            return ds_err_prefix(err, "stage '%s' backward", s->name);
        din = s->grad_in; /* written, not zeroed: the root is its one contributor */
    }
    if (ds_layer_backward(s->root, &s->run, in, dout, din, 0, err) != 0)
        return ds_err_prefix(err, "stage '%s' backward", s->name);
    return 0;
}

void ds_stage_zero_grad(ds_stage *s) {
    if (s->flat_grads) ds_tensor_zero(s->flat_grads); /* nothing when ZeRO released it */
}

void ds_stage_release(ds_stage *s) {
    s->last_in = NULL;
    ds_layer_release(s->root);
    ds_layer_images_free();
    ds_tensor_release(s->grad_in);
    ds_tensor_release(s->in_staged);
    ds_tensor_release(s->dout_staged);
}
