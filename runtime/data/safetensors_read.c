/* safetensors: the reader. The header is parsed by the common JSON reader (strict, with
 * a nesting limit and a cap on values, so hostile input cannot recurse deeply or allocate
 * without bound), then walked against the format's schema: an object of tensor entries
 * and an optional "__metadata__" object of strings. Unknown keys inside a tensor entry
 * are ignored, as the reference does. Sizes and offsets are u64 in the format, but the
 * tree holds integers as int64: above 2^63 - 1 they are refused, which no real file
 * comes near (a byte buffer that large cannot be mapped). */
#include "safetensors.h"

#include <stdlib.h>
#include <string.h>

#include "bytetok.h"
#include "ds_json_read.h"
#include "ds_mapfile.h"

/* The header object and a tensor entry are two levels; unknown values get the rest. */
#define HEADER_MAX_DEPTH 64
/* A tensor costs about 8 values (entry, dtype, shape and its sizes, two offsets): this
 * allows half a million tensors while bounding what a hostile header of a few megabytes
 * of "[0,0,0,..." can make the tree allocate (about 0.5 GB, keys and strings included). */
#define HEADER_MAX_VALUES (1u << 22)

struct ds_st_file {
    ds_mapfile file; /* what ds_st_open mapped; empty for ds_st_parse */
    ds_st_tensor *tensors; /* sorted by name */
    size_t n, cap;
    ds_st_kv *meta; /* sorted by key */
    size_t nmeta, meta_cap;
};

/* The header text, for messages that quote the source of a value. */
typedef struct header_ctx {
    const char *h;
    size_t n;
    ds_err *err;
} header_ctx;

/* A string value (already known to be one) that is also a C string. */
static int no_nul(const header_ctx *c, const ds_jv *v) {
    if (!ds_jv_is_cstr(v))
        return ds_err_set(c->err, "header byte %zu: \\u0000 inside a string", v->at);
    return 0;
}

/* A string value that is a C string (a decoded NUL would cut it short). */
static int c_string(const header_ctx *c, const ds_jv *v, const char *what) {
    if (v->type != DS_JV_STR)
        return ds_err_set(c->err, "header byte %zu: %s must be a string, found %s", v->at, what,
                          ds_jv_type_name(v->type));
    return no_nul(c, v);
}

/* A non-negative integer without sign, fraction or exponent, at most 2^63 - 1. The
 * tree says whether it fits in int64; the source says how it was written. */
static int uint_value(const header_ctx *c, const ds_jv *v, const char *what, uint64_t *out) {
    if (v->type != DS_JV_NUM)
        return ds_err_set(c->err, "header byte %zu: expected %s, found %s", v->at, what,
                          ds_jv_type_name(v->type));
    if (c->h[v->at] == '-')
        return ds_err_set(c->err, "header byte %zu: expected %s, found '-'", v->at, what);
    if (!v->is_int) {
        size_t e = v->at;
        while (e < c->n && c->h[e] >= '0' && c->h[e] <= '9') e++;
        if (e < c->n && (c->h[e] == '.' || c->h[e] == 'e' || c->h[e] == 'E'))
            return ds_err_set(c->err, "header byte %zu: expected %s, an integer (no fraction or "
                                      "exponent)", v->at, what);
        return ds_err_set(c->err, "header byte %zu: integer too large for %s", v->at, what);
    }
    *out = (uint64_t)v->inum;
    return 0;
}

static int entry_dtype(const header_ctx *c, const ds_jv *v, ds_st_tensor *t) {
    if (c_string(c, v, "\"dtype\"")) return -1;
    if (ds_st_dtype_parse(v->str, v->len, &t->dtype) != 0)
        return ds_err_set(c->err, "header byte %zu: unknown dtype \"%.40s\"", v->at, v->str);
    return 0;
}

static int entry_shape(const header_ctx *c, const ds_jv *v, ds_st_tensor *t) {
    if (v->type != DS_JV_ARR)
        return ds_err_set(c->err, "header byte %zu: \"shape\" must be an array, found %s", v->at,
                          ds_jv_type_name(v->type));
    if (v->len > DS_ST_MAX_DIMS)
        return ds_err_set(c->err, "header byte %zu: shape has more than %d dimensions",
                          v->items[DS_ST_MAX_DIMS].at, DS_ST_MAX_DIMS);
    t->ndim = (int)v->len;
    for (size_t d = 0; d < v->len; d++) {
        uint64_t size = 0;
        if (uint_value(c, &v->items[d], "a dimension size", &size)) return -1;
        t->shape[d] = (int64_t)size;
    }
    return 0;
}

static int entry_offsets(const header_ctx *c, const ds_jv *v, uint64_t off[2]) {
    if (v->type != DS_JV_ARR || v->len != 2)
        return ds_err_set(c->err, "header byte %zu: data_offsets must be an array of two "
                                  "integers [begin, end]", v->at);
    if (uint_value(c, &v->items[0], "the begin offset", &off[0])) return -1;
    return uint_value(c, &v->items[1], "the end offset", &off[1]);
}

static int tensor_entry(const header_ctx *c, const ds_jv *e, ds_st_tensor *t, uint64_t off[2]) {
    if (e->type != DS_JV_OBJ)
        return ds_err_set(c->err, "header byte %zu: a tensor entry must be an object, found %s",
                          e->at, ds_jv_type_name(e->type));
    if (e->len == 0)
        return ds_err_set(c->err, "header byte %zu: empty tensor entry (dtype, shape, "
                                  "data_offsets required)", e->at);
    int seen[3] = {0, 0, 0}; /* dtype, shape, data_offsets */
    for (size_t i = 0; i < e->len; i++) {
        const char *key = e->keys[i];
        const ds_jv *v = &e->items[i];
        int k = !strcmp(key, "dtype") ? 0 : !strcmp(key, "shape") ? 1
              : !strcmp(key, "data_offsets") ? 2 : -1;
        if (k < 0) continue;
        if (seen[k]++)
            return ds_err_set(c->err, "header byte %zu: key \"%s\" given twice", v->at, key);
        int rc = k == 0 ? entry_dtype(c, v, t) : k == 1 ? entry_shape(c, v, t)
                                                         : entry_offsets(c, v, off);
        if (rc) return -1;
    }
    if (!seen[0] || !seen[1] || !seen[2])
        return ds_err_set(c->err, "header byte %zu: tensor entry lacks %s", e->at,
                          !seen[0] ? "\"dtype\"" : !seen[1] ? "\"shape\"" : "\"data_offsets\"");
    return 0;
}

static int add_meta(ds_st_file *f, const char *k, const char *v, ds_err *err) {
    if (f->nmeta == f->meta_cap) {
        size_t cap = f->meta_cap ? f->meta_cap * 2 : 8;
        ds_st_kv *m = realloc(f->meta, cap * sizeof *m);
        if (!m) return ds_err_set(err, "out of memory");
        f->meta = m;
        f->meta_cap = cap;
    }
    char *kc = strdup(k), *vc = strdup(v);
    if (!kc || !vc) return free(kc), free(vc), ds_err_set(err, "out of memory");
    f->meta[f->nmeta++] = (ds_st_kv){kc, vc};
    return 0;
}

static int metadata(const header_ctx *c, const ds_jv *m, ds_st_file *f) {
    if (m->type == DS_JV_NULL) return 0; /* the reference takes null as none */
    if (m->type != DS_JV_OBJ)
        return ds_err_set(c->err, "header byte %zu: __metadata__ must be an object, found %s",
                          m->at, ds_jv_type_name(m->type));
    for (size_t i = 0; i < m->len; i++) {
        const ds_jv *v = &m->items[i];
        if (v->type != DS_JV_STR)
            return ds_err_set(c->err, "header byte %zu: __metadata__ values must be strings, "
                                      "\"%.200s\" is %s", v->at, m->keys[i],
                              ds_jv_type_name(v->type));
        if (no_nul(c, v) || add_meta(f, m->keys[i], v->str, c->err))
            return -1;
    }
    return 0;
}

/* One slot more in f->tensors and in offs (kept the same length). */
static int add_tensor(ds_st_file *f, uint64_t (**offs)[2], ds_err *err) {
    if (f->n < f->cap) return 0;
    size_t cap = f->cap ? f->cap * 2 : 16;
    ds_st_tensor *t = realloc(f->tensors, cap * sizeof *t);
    if (!t) return ds_err_set(err, "out of memory");
    f->tensors = t;
    uint64_t(*o)[2] = realloc(*offs, cap * sizeof *o);
    if (!o) return ds_err_set(err, "out of memory");
    *offs = o;
    f->cap = cap;
    return 0;
}

static int header(const header_ctx *c, const ds_jv *root, ds_st_file *f, uint64_t (**offs)[2]) {
    int seen_meta = 0;
    for (size_t i = 0; i < root->len; i++) {
        const char *key = root->keys[i];
        const ds_jv *v = &root->items[i];
        if (!strcmp(key, "__metadata__")) {
            if (seen_meta++)
                return ds_err_set(c->err, "header byte %zu: __metadata__ given twice", v->at);
            if (metadata(c, v, f)) return -1;
            continue;
        }
        if (add_tensor(f, offs, c->err)) return -1;
        ds_st_tensor *t = &f->tensors[f->n];
        memset(t, 0, sizeof *t);
        t->name = strdup(key);
        if (!t->name) return ds_err_set(c->err, "out of memory");
        f->n++; /* counted now, so close() frees the name on error */
        if (tensor_entry(c, v, t, (*offs)[f->n - 1]))
            return ds_err_prefix(c->err, "tensor '%.200s'", key);
    }
    return 0;
}

/* The JSON text, then the schema. */
static int parse_header(const char *h, size_t n, ds_st_file *f, uint64_t (**offs)[2],
                        ds_err *err) {
    ds_jv_limits lim = {.max_depth = HEADER_MAX_DEPTH, .max_values = HEADER_MAX_VALUES};
    ds_err pe;
    ds_jv *root = ds_jv_parse_limits(h, n, &lim, &pe);
    if (!root) return ds_err_set(err, "header %s", pe.msg);
    header_ctx c = {.h = h, .n = n, .err = err};
    int rc = header(&c, root, f, offs); /* root is an object: the text starts with '{' */
    ds_jv_free(root);
    return rc;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const ds_st_tensor *)a)->name, ((const ds_st_tensor *)b)->name);
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const ds_st_kv *)a)->key, ((const ds_st_kv *)b)->key);
}

static int by_offsets(const void *a, const void *b) {
    const ds_st_tensor *x = *(ds_st_tensor *const *)a, *y = *(ds_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Sizes match shapes, and the tensors tile the byte buffer exactly: in range, no overlap,
 * no gap, nothing after the last (as the reference requires). */
static int check_layout(ds_st_file *f, const uint64_t (*offs)[2], const uint8_t *buf,
                        uint64_t buf_len, ds_err *err) {
    for (size_t i = 0; i < f->n; i++) {
        ds_st_tensor *t = &f->tensors[i];
        uint64_t b = offs[i][0], e = offs[i][1], n = ds_st_dtype_size(t->dtype);
        for (int d = 0; d < t->ndim; d++)
            if (__builtin_mul_overflow(n, (uint64_t)t->shape[d], &n))
                return ds_err_set(err, "tensor '%s': shape too large", t->name);
        if (e < b)
            return ds_err_set(err, "tensor '%s': data_offsets [%llu, %llu) end before they begin",
                              t->name, (unsigned long long)b, (unsigned long long)e);
        if (e - b != n)
            return ds_err_set(err, "tensor '%s': data_offsets [%llu, %llu) hold %llu bytes, "
                              "its %s shape needs %llu", t->name, (unsigned long long)b,
                              (unsigned long long)e, (unsigned long long)(e - b),
                              ds_st_dtype_name(t->dtype), (unsigned long long)n);
        if (e > buf_len)
            return ds_err_set(err, "tensor '%s': data_offsets [%llu, %llu) run past the end of "
                              "the %llu-byte buffer", t->name, (unsigned long long)b,
                              (unsigned long long)e, (unsigned long long)buf_len);
        t->begin = b;
        t->nbytes = n;
        t->data = buf + b;
    }
    ds_st_tensor **by_off = malloc((f->n + 1) * sizeof *by_off);
    if (!by_off) return ds_err_set(err, "out of memory");
    for (size_t i = 0; i < f->n; i++) by_off[i] = &f->tensors[i];
    if (f->n > 1) qsort(by_off, f->n, sizeof *by_off, by_offsets);
    uint64_t at = 0;
    int rc = 0;
    for (size_t i = 0; i < f->n && rc == 0; i++) {
        const ds_st_tensor *t = by_off[i];
        if (t->begin < at)
            rc = ds_err_set(err, "tensor '%s' at [%llu, %llu) overlaps tensor '%s' ending at %llu",
                            t->name, (unsigned long long)t->begin,
                            (unsigned long long)(t->begin + t->nbytes), by_off[i - 1]->name,
                            (unsigned long long)at);
        else if (t->begin > at)
            rc = ds_err_set(err, "a gap of %llu bytes before tensor '%s' at offset %llu",
                            (unsigned long long)(t->begin - at), t->name,
                            (unsigned long long)t->begin);
        at = t->begin + t->nbytes;
    }
    free(by_off);
    if (rc == 0 && at != buf_len)
        rc = ds_err_set(err, "%llu bytes after the last tensor (the buffer has %llu, tensors "
                        "cover %llu)", (unsigned long long)(buf_len - at),
                        (unsigned long long)buf_len, (unsigned long long)at);
    return rc;
}

static int check_unique(ds_st_file *f, ds_err *err) {
    if (f->n > 1) qsort(f->tensors, f->n, sizeof *f->tensors, by_name);
    for (size_t i = 1; i < f->n; i++)
        if (!strcmp(f->tensors[i].name, f->tensors[i - 1].name))
            return ds_err_set(err, "tensor '%s' given twice", f->tensors[i].name);
    if (f->nmeta > 1) qsort(f->meta, f->nmeta, sizeof *f->meta, by_key);
    for (size_t i = 1; i < f->nmeta; i++)
        if (!strcmp(f->meta[i].key, f->meta[i - 1].key))
            return ds_err_set(err, "__metadata__ key '%s' given twice", f->meta[i].key);
    return 0;
}

static uint64_t get_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int parse_into(ds_st_file *f, const uint8_t *bytes, size_t len, ds_err *err) {
    if (len < 8)
        return ds_err_set(err, "%zu bytes: too short for the 8-byte header length", len);
    uint64_t hlen = get_le64(bytes);
    if (hlen > DS_ST_MAX_HEADER)
        return ds_err_set(err, "header length %llu exceeds the limit of %u bytes",
                          (unsigned long long)hlen, DS_ST_MAX_HEADER);
    if (hlen > len - 8)
        return ds_err_set(err, "header length %llu runs past the end of the file (%zu bytes)",
                          (unsigned long long)hlen, len);
    if (hlen < 2) return ds_err_set(err, "header length %llu is too short for a JSON object",
                                    (unsigned long long)hlen);
    const char *h = (const char *)bytes + 8;
    size_t bad;
    if (ds_utf8_validate((const uint8_t *)h, hlen, &bad) != 0)
        return ds_err_set(err, "header byte %zu: invalid UTF-8", bad);
    if (h[0] != '{') return ds_err_set(err, "header does not start with '{'");
    uint64_t(*offs)[2] = NULL;
    int rc = parse_header(h, hlen, f, &offs, err);
    if (rc == 0) rc = check_layout(f, offs, bytes + 8 + hlen, len - 8 - hlen, err);
    if (rc == 0) rc = check_unique(f, err);
    free(offs);
    return rc;
}

ds_st_file *ds_st_parse(const void *bytes, size_t len, const char *name, ds_err *err) {
    ds_st_file *f = calloc(1, sizeof *f);
    if (!f) return ds_err_set(err, "%s: out of memory", name), NULL;
    if (parse_into(f, bytes, len, err) != 0) {
        ds_err_prefix(err, "%s: not a valid safetensors file", name);
        ds_st_close(f);
        return NULL;
    }
    return f;
}

ds_st_file *ds_st_open(const char *path, ds_err *err) {
    ds_mapfile m;
    if (ds_mapfile_open(&m, path, NULL, err) != 0) return NULL;
    ds_st_file *f = ds_st_parse(m.data ? m.data : "", m.len, path, err);
    if (!f) {
        ds_mapfile_close(&m);
        return NULL;
    }
    f->file = m;
    return f;
}

void ds_st_close(ds_st_file *f) {
    if (!f) return;
    for (size_t i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    for (size_t i = 0; i < f->nmeta; i++) free((char *)f->meta[i].key), free((char *)f->meta[i].value);
    free(f->tensors);
    free(f->meta);
    ds_mapfile_close(&f->file);
    free(f);
}

size_t ds_st_count(const ds_st_file *f) { return f->n; }
const ds_st_tensor *ds_st_at(const ds_st_file *f, size_t i) { return i < f->n ? &f->tensors[i] : NULL; }
size_t ds_st_meta_count(const ds_st_file *f) { return f->nmeta; }
const ds_st_kv *ds_st_meta_at(const ds_st_file *f, size_t i) { return i < f->nmeta ? &f->meta[i] : NULL; }

const ds_st_tensor *ds_st_find(const ds_st_file *f, const char *name) {
    ds_st_tensor key = {.name = name};
    return f->n ? bsearch(&key, f->tensors, f->n, sizeof *f->tensors, by_name) : NULL;
}

const char *ds_st_meta_get(const ds_st_file *f, const char *key) {
    ds_st_kv k = {.key = key};
    const ds_st_kv *hit = f->nmeta ? bsearch(&k, f->meta, f->nmeta, sizeof *f->meta, by_key) : NULL;
    return hit ? hit->value : NULL;
}
