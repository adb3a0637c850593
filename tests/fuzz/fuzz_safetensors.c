/* libFuzzer: the safetensors reader on arbitrary bytes. Whatever parses must survive a
 * round trip: serialized again and re-parsed, it gives the same tensors, metadata and
 * data, and serializing that gives the same bytes (the writer's layout is canonical). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "safetensors.h"

static uint8_t *reserialize(const ds_st_file *f, size_t *len) {
    size_t n = ds_st_count(f), nm = ds_st_meta_count(f);
    ds_st_tensor *ts = calloc(n + 1, sizeof *ts);
    ds_st_kv *kv = calloc(nm + 1, sizeof *kv);
    if (!ts || !kv) abort();
    for (size_t i = 0; i < n; i++) ts[i] = *ds_st_at(f, i);
    for (size_t i = 0; i < nm; i++) kv[i] = *ds_st_meta_at(f, i);
    ds_err err;
    uint8_t *out = ds_st_serialize(ts, n, kv, nm, len, &err);
    if (!out) abort(); /* everything the reader accepts, the writer can write */
    free(ts);
    free(kv);
    return out;
}

static void same(const ds_st_file *a, const ds_st_file *b) {
    if (ds_st_count(a) != ds_st_count(b) || ds_st_meta_count(a) != ds_st_meta_count(b)) abort();
    for (size_t i = 0; i < ds_st_count(a); i++) {
        const ds_st_tensor *x = ds_st_at(a, i), *y = ds_st_at(b, i);
        if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim ||
            x->nbytes != y->nbytes || memcmp(x->shape, y->shape, sizeof x->shape) ||
            (x->nbytes && memcmp(x->data, y->data, x->nbytes)))
            abort();
    }
    for (size_t i = 0; i < ds_st_meta_count(a); i++)
        if (strcmp(ds_st_meta_at(a, i)->key, ds_st_meta_at(b, i)->key) ||
            strcmp(ds_st_meta_at(a, i)->value, ds_st_meta_at(b, i)->value))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ds_err err;
    ds_st_file *f = ds_st_parse(data, size, "fuzz", &err);
    if (!f) return 0;
    for (size_t i = 0; i < ds_st_count(f); i++)
        if (ds_st_find(f, ds_st_at(f, i)->name) != ds_st_at(f, i)) abort();
    size_t len1, len2;
    uint8_t *once = reserialize(f, &len1);
    ds_st_file *g = ds_st_parse(once, len1, "again", &err);
    if (!g) abort();
    same(f, g);
    uint8_t *twice = reserialize(g, &len2);
    if (len1 != len2 || memcmp(once, twice, len1)) abort();
    ds_st_close(g);
    ds_st_close(f);
    free(once);
    free(twice);
    return 0;
}
