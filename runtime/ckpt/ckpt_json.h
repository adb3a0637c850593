/* A small JSON reader for meta.json (and the engine's opaque state object): a strict
 * RFC 8259 parser into a tree. Meta files are user-editable and may be hostile, so every
 * input either parses or is refused with a message naming the offset; nesting deeper
 * than DS_CKJ_MAX_DEPTH is refused rather than recursing without bound. */
#ifndef DS_CKPT_JSON_H
#define DS_CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "ds_json.h"

#define DS_CKJ_MAX_DEPTH 30

typedef enum ds_ckj_type { CKJ_NULL, CKJ_BOOL, CKJ_NUM, CKJ_STR, CKJ_ARR, CKJ_OBJ } ds_ckj_type;

typedef struct ds_ckj ds_ckj;
struct ds_ckj {
    ds_ckj_type type;
    int boolean;
    double num;
    int is_int;       /* number written without fraction/exponent and fits in int64 */
    long long inum;
    char *str;        /* CKJ_STR: decoded UTF-8, NUL-terminated (may hold NULs: see len) */
    size_t len;       /* CKJ_STR: bytes; CKJ_ARR / CKJ_OBJ: members */
    ds_ckj *items;    /* members */
    char **keys;      /* CKJ_OBJ: one key per member */
};

/* Parses text[0..n). NULL with err ("offset K: what") on any syntax error. */
ds_ckj *ds_ckj_parse(const char *text, size_t n, ds_err *err);
void ds_ckj_free(ds_ckj *v);

/* The member of object o named key, or NULL (o not an object, or no such key). */
const ds_ckj *ds_ckj_get(const ds_ckj *o, const char *key);

/* Nesting levels of v: 0 for a scalar, 1 for [] or {}, 2 for [[]], ... */
int ds_ckj_depth(const ds_ckj *v);

/* Writes v through a ds_json writer (the canonical form used for checksums). */
void ds_ckj_emit(ds_json *j, const ds_ckj *v);

#endif
