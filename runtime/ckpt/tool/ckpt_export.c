#include "ckpt_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_json_read.h"
#include "kernel_math.h"
#include "safetensors_dtype.h"

typedef struct export_job {
    ds_ckpt *ck;
    char where[4200]; /* "<step dir>/meta.json: engine.export" for messages */
    ds_st_tensor *tensors;
    size_t ntensors;
    ds_st_kv *meta;
    size_t nmeta;
} export_job;

/* The dtype to write: the array's, or "dtype" (bf16 / fp16 from fp32). */
static int out_dtype(const export_job *x, const ds_jv *t, size_t i, const char *name, ds_dtype from,
                     ds_dtype *to, ds_err *err) {
    const ds_jv *d = ds_jv_get(t, "dtype");
    *to = from;
    if (!d) return 0;
    static const ds_dtype KNOWN[] = {DS_F32, DS_BF16, DS_F16};
    for (size_t k = 0; d->type == DS_JV_STR && k < sizeof KNOWN / sizeof KNOWN[0]; k++) {
        if (strcmp(d->str, ds_dtype_name(KNOWN[k]))) continue;
        *to = KNOWN[k];
        if (*to == from || from == DS_F32) return 0;
        return ds_err_set(err, "%s.tensors[%zu] '%s': cannot write a %s array as %s", x->where, i,
                          name, ds_dtype_name(from), d->str);
    }
    return ds_err_set(err, "%s.tensors[%zu] '%s': \"dtype\" must be \"fp32\", \"bf16\" or \"fp16\"",
                      x->where, i, name);
}

/* fp32 elements into bf16 / fp16 in place (the 16-bit values take the front half). */
static void narrow(unsigned char *buf, uint64_t n, ds_dtype to) {
    uint16_t *out = (uint16_t *)buf;
    for (uint64_t k = 0; k < n; k++) {
        float f;
        memcpy(&f, buf + 4 * k, 4);
        out[k] = to == DS_BF16 ? ds_km_f32_to_bf16(f) : ds_km_f32_to_f16(f);
    }
}

static int int_field(const export_job *x, const ds_jv *t, size_t i, const char *key,
                     long long *out, ds_err *err) {
    const ds_jv *v = ds_jv_get(t, key);
    if (!v || v->type != DS_JV_NUM || !v->is_int || v->inum < 0)
        return ds_err_set(err, "%s.tensors[%zu]: \"%s\" missing or not an integer >= 0",
                          x->where, i, key);
    *out = v->inum;
    return 0;
}

/* Reads tensor i's elements (transposed if asked) into a fresh buffer. */
static int load_tensor(export_job *x, const ds_jv *t, size_t i, ds_err *err) {
    ds_st_tensor *st = &x->tensors[i];
    const ds_jv *name = ds_jv_get(t, "name"), *array = ds_jv_get(t, "array");
    const ds_jv *shape = ds_jv_get(t, "shape"), *tr = ds_jv_get(t, "transpose");
    if (!name || name->type != DS_JV_STR || !array || array->type != DS_JV_STR)
        return ds_err_set(err, "%s.tensors[%zu]: \"name\" and \"array\" must be strings",
                          x->where, i);
    if (!shape || shape->type != DS_JV_ARR || shape->len > DS_ST_MAX_DIMS)
        return ds_err_set(err, "%s.tensors[%zu] '%s': \"shape\" must be a list of at most %d "
                               "sizes", x->where, i, name->str, DS_ST_MAX_DIMS);
    if (tr && tr->type != DS_JV_BOOL)
        return ds_err_set(err, "%s.tensors[%zu]: \"transpose\" must be true or false", x->where, i);
    long long offset = 0;
    if (int_field(x, t, i, "offset", &offset, err)) return -1;
    ds_ckpt_array a;
    if (ds_ckpt_array_info(x->ck, array->str, &a, err))
        return ds_err_prefix(err, "export '%s'", name->str);
    uint64_t numel = 1;
    st->ndim = (int)shape->len;
    for (size_t d = 0; d < shape->len; d++) {
        const ds_jv *s = &shape->items[d];
        if (s->type != DS_JV_NUM || !s->is_int || s->inum < 0 ||
            (s->inum && numel > UINT64_MAX / (uint64_t)s->inum))
            return ds_err_set(err, "%s.tensors[%zu] '%s': bad size in \"shape\"", x->where, i,
                              name->str);
        st->shape[d] = s->inum;
        numel *= (uint64_t)s->inum;
    }
    if ((uint64_t)offset > a.numel || numel > a.numel - (uint64_t)offset)
        return ds_err_set(err, "%s.tensors[%zu] '%s': elements [%lld, +%llu) outside array "
                               "'%s' of %llu", x->where, i, name->str, offset,
                          (unsigned long long)numel, a.name, (unsigned long long)a.numel);
    int transposed = tr && tr->boolean;
    if (transposed && st->ndim != 2)
        return ds_err_set(err, "%s.tensors[%zu] '%s': transpose needs a 2-D shape", x->where, i,
                          name->str);
    ds_dtype to;
    if (out_dtype(x, t, i, name->str, a.dtype, &to, err)) return -1;
    if (ds_st_dtype_of(to, &st->dtype))
        return ds_err_set(err, "export '%s': array dtype has no safetensors name", name->str);
    size_t esz = ds_st_dtype_size(st->dtype);
    unsigned char *buf = malloc(numel * ds_dtype_size(a.dtype) + 1), *out = buf;
    if (!buf) return ds_err_set(err, "export '%s': out of memory", name->str);
    st->name = name->str;
    st->data = buf; /* owned from here: freed with the job */
    st->nbytes = numel * esz;
    if (ds_ckpt_read_range(x->ck, array->str, (uint64_t)offset, (uint64_t)offset + numel, buf, err))
        return ds_err_prefix(err, "export '%s'", name->str);
    if (to != a.dtype) narrow(buf, numel, to);
    if (transposed) {
        if (!(out = malloc(numel * esz + 1))) return ds_err_set(err, "out of memory");
        ds_transpose2d(out, buf, st->shape[0], st->shape[1], esz);
        free(buf);
        st->data = out;
        int64_t r = st->shape[0];
        st->shape[0] = st->shape[1];
        st->shape[1] = r;
    }
    return 0;
}

static int load_metadata(export_job *x, const ds_jv *m, ds_err *err) {
    if (!m) return 0;
    if (m->type != DS_JV_OBJ) return ds_err_set(err, "%s.metadata: must be an object", x->where);
    x->meta = calloc(m->len ? m->len : 1, sizeof *x->meta);
    if (!x->meta) return ds_err_set(err, "out of memory");
    for (size_t i = 0; i < m->len; i++) {
        if (m->items[i].type != DS_JV_STR)
            return ds_err_set(err, "%s.metadata.%s: must be a string", x->where, m->keys[i]);
        x->meta[x->nmeta++] = (ds_st_kv){m->keys[i], m->items[i].str};
    }
    return 0;
}

int ds_ckpt_export_safetensors(ds_ckpt *ck, const char *out_path, ds_err *err) {
    export_job x = {.ck = ck};
    snprintf(x.where, sizeof x.where, "%s/meta.json: engine.export", ds_ckpt_dir(ck));
    const char *engine = ds_ckpt_meta_extra(ck);
    ds_jv *root = ds_jv_parse(engine, strlen(engine), err);
    if (!root) return ds_err_prefix(err, "%s", x.where);
    const ds_jv *ex = ds_jv_get(root, "export");
    const ds_jv *list = ds_jv_get(ex, "tensors");
    int rc = -1;
    if (!ex || ex->type != DS_JV_OBJ || !list || list->type != DS_JV_ARR || list->len == 0) {
        ds_err_set(err, "%s: missing; this checkpoint's engine did not describe its tensors "
                        "(\"export\": {\"tensors\": [...]})", x.where);
        goto out;
    }
    x.tensors = calloc(list->len, sizeof *x.tensors);
    if (!x.tensors) {
        ds_err_set(err, "out of memory");
        goto out;
    }
    if (load_metadata(&x, ds_jv_get(ex, "metadata"), err)) goto out;
    for (; x.ntensors < list->len; x.ntensors++)
        if (load_tensor(&x, &list->items[x.ntensors], x.ntensors, err)) {
            x.ntensors++; /* its buffer, if any, is freed below */
            goto out;
        }
    rc = ds_st_write(out_path, x.tensors, x.ntensors, x.meta, x.nmeta, err);
out:
    for (size_t i = 0; i < x.ntensors; i++) free((void *)x.tensors[i].data);
    free(x.tensors);
    free(x.meta);
    ds_jv_free(root);
    return rc;
}
