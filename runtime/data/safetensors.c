/* safetensors: dtypes and the writer. The reader is in safetensors_read.c. */
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytetok.h"
#include "ds_buf.h"

/* In the reference's enum order: the writer sorts by it (largest first). */
static const struct {
    const char *name;
    size_t size;
} DTYPES[DS_ST_NDTYPES] = {
    [DS_ST_BOOL] = {"BOOL", 1}, [DS_ST_U8] = {"U8", 1},   [DS_ST_I8] = {"I8", 1},
    [DS_ST_F8_E5M2] = {"F8_E5M2", 1}, [DS_ST_F8_E4M3] = {"F8_E4M3", 1},
    [DS_ST_I16] = {"I16", 2}, [DS_ST_U16] = {"U16", 2}, [DS_ST_F16] = {"F16", 2},
    [DS_ST_BF16] = {"BF16", 2}, [DS_ST_I32] = {"I32", 4}, [DS_ST_U32] = {"U32", 4},
    [DS_ST_F32] = {"F32", 4}, [DS_ST_F64] = {"F64", 8}, [DS_ST_I64] = {"I64", 8},
    [DS_ST_U64] = {"U64", 8},
};

const char *ds_st_dtype_name(ds_st_dtype t) {
    return (unsigned)t < DS_ST_NDTYPES ? DTYPES[t].name : "?";
}

size_t ds_st_dtype_size(ds_st_dtype t) { return (unsigned)t < DS_ST_NDTYPES ? DTYPES[t].size : 0; }

int ds_st_dtype_parse(const char *s, size_t n, ds_st_dtype *out) {
    for (int i = 0; i < DS_ST_NDTYPES; i++)
        if (strlen(DTYPES[i].name) == n && !memcmp(DTYPES[i].name, s, n)) {
            *out = (ds_st_dtype)i;
            return 0;
        }
    return -1;
}

/* A JSON string escaped as serde_json (the reference's writer) escapes it. */
static void sb_json_string(ds_buf *b, const char *s) {
    static const char hex[] = "0123456789abcdef";
    ds_buf_put(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': ds_buf_put(b, "\\\"", 2); break;
        case '\\': ds_buf_put(b, "\\\\", 2); break;
        case '\b': ds_buf_put(b, "\\b", 2); break;
        case '\f': ds_buf_put(b, "\\f", 2); break;
        case '\n': ds_buf_put(b, "\\n", 2); break;
        case '\r': ds_buf_put(b, "\\r", 2); break;
        case '\t': ds_buf_put(b, "\\t", 2); break;
        default:
            if (*c < 0x20) {
                char u[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]};
                ds_buf_put(b, u, 6);
            } else {
                ds_buf_put(b, (const char *)c, 1);
            }
        }
    }
    ds_buf_put(b, "\"", 1);
}

static int by_dtype_then_name(const void *a, const void *b, void *tensors) {
    const ds_st_tensor *x = &((const ds_st_tensor *)tensors)[*(const size_t *)a];
    const ds_st_tensor *y = &((const ds_st_tensor *)tensors)[*(const size_t *)b];
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const ds_st_kv *)a)->key, ((const ds_st_kv *)b)->key);
}

static int check_string(const char *what, const char *s, ds_err *err) {
    size_t bad;
    if (ds_utf8_validate((const uint8_t *)s, strlen(s), &bad) != 0)
        return ds_err_set(err, "%s is not valid UTF-8 (byte %zu)", what, bad);
    return 0;
}

static int check_tensor(const ds_st_tensor *t, ds_err *err) {
    if (!t->name) return ds_err_set(err, "a tensor has no name"); /* "" is one, as in the reference */
    if (!strcmp(t->name, "__metadata__"))
        return ds_err_set(err, "\"__metadata__\" cannot name a tensor");
    if (check_string("tensor name", t->name, err) != 0) return -1;
    if ((unsigned)t->dtype >= DS_ST_NDTYPES)
        return ds_err_set(err, "tensor '%s': bad dtype %d", t->name, (int)t->dtype);
    if (t->ndim < 0 || t->ndim > DS_ST_MAX_DIMS)
        return ds_err_set(err, "tensor '%s': %d dimensions (0..%d allowed)", t->name, t->ndim,
                          DS_ST_MAX_DIMS);
    uint64_t n = ds_st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || __builtin_mul_overflow(n, (uint64_t)t->shape[d], &n))
            return ds_err_set(err, "tensor '%s': bad size %lld in dimension %d", t->name,
                              (long long)t->shape[d], d);
    }
    if (n != t->nbytes)
        return ds_err_set(err, "tensor '%s': %llu bytes given, its shape and dtype make %llu",
                          t->name, (unsigned long long)t->nbytes, (unsigned long long)n);
    if (n && !t->data) return ds_err_set(err, "tensor '%s': no data", t->name);
    return 0;
}

/* Validates the entries and builds the padded header; *order gets the layout order. */
static char *build_header(const ds_st_tensor *ts, size_t n, const ds_st_kv *meta, size_t nmeta,
                          size_t **order_out, size_t *hlen, ds_err *err) {
    for (size_t i = 0; i < n; i++)
        if (check_tensor(&ts[i], err) != 0) return NULL;
    for (size_t i = 0; i < nmeta; i++) {
        if (!meta[i].key || !meta[i].value)
            return ds_err_set(err, "metadata entry %zu is NULL", i), NULL;
        if (check_string("metadata key", meta[i].key, err) != 0 ||
            check_string("metadata value", meta[i].value, err) != 0)
            return NULL;
    }
    size_t *order = malloc((n + 1) * sizeof *order);
    ds_st_kv *kv = malloc((nmeta + 1) * sizeof *kv);
    if (!order || !kv) {
        free(order), free(kv);
        return ds_err_set(err, "out of memory"), NULL;
    }
    for (size_t i = 0; i < n; i++) order[i] = i;
    if (n > 1) qsort_r(order, n, sizeof *order, by_dtype_then_name, (void *)ts);
    if (nmeta) memcpy(kv, meta, nmeta * sizeof *kv);
    if (nmeta > 1) qsort(kv, nmeta, sizeof *kv, by_key);
    ds_buf b = {0};
    ds_buf_puts(&b, "{");
    if (nmeta) {
        ds_buf_puts(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < nmeta; i++) {
            if (i && !strcmp(kv[i].key, kv[i - 1].key)) {
                ds_err_set(err, "metadata key '%s' given twice", kv[i].key);
                goto fail;
            }
            if (i) ds_buf_puts(&b, ",");
            sb_json_string(&b, kv[i].key);
            ds_buf_puts(&b, ":");
            sb_json_string(&b, kv[i].value);
        }
        ds_buf_puts(&b, n ? "}," : "}");
    }
    uint64_t offset = 0;
    for (size_t k = 0; k < n; k++) {
        const ds_st_tensor *t = &ts[order[k]];
        for (size_t j = 0; j < k; j++) /* names are few; sorted by dtype first, so scan */
            if (!strcmp(ts[order[j]].name, t->name)) {
                ds_err_set(err, "tensor name '%s' given twice", t->name);
                goto fail;
            }
        if (k) ds_buf_puts(&b, ",");
        sb_json_string(&b, t->name);
        ds_buf_puts(&b, ":{\"dtype\":\"");
        ds_buf_puts(&b, ds_st_dtype_name(t->dtype));
        ds_buf_puts(&b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) ds_buf_puts(&b, ",");
            ds_buf_printf(&b, "%llu", (unsigned long long)t->shape[d]);
        }
        ds_buf_puts(&b, "],\"data_offsets\":[");
        ds_buf_printf(&b, "%llu", (unsigned long long)offset);
        ds_buf_puts(&b, ",");
        offset += t->nbytes;
        ds_buf_printf(&b, "%llu", (unsigned long long)offset);
        ds_buf_puts(&b, "]}");
    }
    ds_buf_puts(&b, "}");
    while (b.len % 8 && !b.oom) ds_buf_puts(&b, " "); /* the reference pads so the data starts 8-aligned */
    if (b.oom) {
        ds_err_set(err, "out of memory");
        goto fail;
    }
    free(kv);
    *order_out = order;
    *hlen = b.len;
    return (char *)b.data;
fail:
    ds_buf_free(&b), free(order), free(kv);
    return NULL;
}

static void put_le64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

uint8_t *ds_st_serialize(const ds_st_tensor *ts, size_t n, const ds_st_kv *meta, size_t nmeta,
                         size_t *len, ds_err *err) {
    size_t *order, hlen;
    char *h = build_header(ts, n, meta, nmeta, &order, &hlen, err);
    if (!h) return NULL;
    size_t total = 8 + hlen;
    for (size_t i = 0; i < n; i++) total += ts[i].nbytes;
    uint8_t *out = malloc(total);
    if (!out) {
        free(h), free(order);
        return ds_err_set(err, "out of memory for %zu bytes", total), NULL;
    }
    put_le64(out, hlen);
    memcpy(out + 8, h, hlen);
    size_t at = 8 + hlen;
    for (size_t k = 0; k < n; k++) {
        const ds_st_tensor *t = &ts[order[k]];
        if (t->nbytes) memcpy(out + at, t->data, t->nbytes);
        at += t->nbytes;
    }
    free(h), free(order);
    *len = total;
    return out;
}

int ds_st_write(const char *path, const ds_st_tensor *ts, size_t n, const ds_st_kv *meta,
                size_t nmeta, ds_err *err) {
    size_t *order, hlen;
    char *h = build_header(ts, n, meta, nmeta, &order, &hlen, err);
    if (!h) return ds_err_prefix(err, "%s", path);
    char tmp[1024];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        free(h), free(order);
        return ds_err_errno(err, errno, "%s: cannot create", tmp);
    }
    uint8_t len8[8];
    put_le64(len8, hlen);
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(h, 1, hlen, fp) == hlen;
    for (size_t k = 0; ok && k < n; k++) {
        const ds_st_tensor *t = &ts[order[k]];
        ok = !t->nbytes || fwrite(t->data, 1, t->nbytes, fp) == t->nbytes;
    }
    int e = errno;
    ok = ok && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    if (!ok) e = errno;
    ok = (fclose(fp) == 0) && ok;
    free(h), free(order);
    if (!ok) {
        unlink(tmp);
        return ds_err_errno(err, e, "%s: write", tmp);
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return ds_err_errno(err, e, "%s: cannot rename to %s", tmp, path);
    }
    return 0;
}
