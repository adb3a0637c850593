/* A strict JSON reader (RFC 8259) into a tree, for input that may be hostile: checkpoint
 * meta.json files (user-editable) and safetensors headers (downloaded). Every input
 * either parses or is refused with "byte K: what, found X". Nesting deeper than a limit
 * is refused rather than recursed into, and a caller may cap the number of values, so
 * a small hostile text cannot recurse without bound or allocate without bound.
 *
 * What it refuses beyond the grammar: numbers that overflow a double (1e999), and
 * "\u0000" inside a key (keys are C strings; a NUL would silently cut them). Strings
 * may hold NULs (see len); duplicate keys are kept in order (ds_jv_get finds the
 * first), so formats that forbid them check themselves. The text need not be
 * NUL-terminated and need not be valid UTF-8 (bytes >= 0x80 are copied as they are). */
#ifndef DS_JSON_READ_H
#define DS_JSON_READ_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "ds_json.h"

/* The default nesting limit. Checkpoints rely on it: the engine's state is saved one
 * level down in meta.json and must read back with the same limit. */
#define DS_JV_MAX_DEPTH 30

typedef enum ds_jv_type {
    DS_JV_NULL, DS_JV_BOOL, DS_JV_NUM, DS_JV_STR, DS_JV_ARR, DS_JV_OBJ
} ds_jv_type;

typedef struct ds_jv ds_jv;
struct ds_jv {
    ds_jv_type type;
    int boolean;
    double num;       /* DS_JV_NUM: always set */
    int is_int;       /* written without fraction or exponent, and fits in int64 */
    long long inum;   /* when is_int */
    char *str;        /* DS_JV_STR: decoded, NUL-terminated (may hold NULs: see len) */
    size_t len;       /* DS_JV_STR: bytes; DS_JV_ARR / DS_JV_OBJ: members */
    ds_jv *items;     /* members */
    char **keys;      /* DS_JV_OBJ: one key per member */
    size_t at;        /* byte offset of the value's first character in the text */
};

typedef struct ds_jv_limits {
    int max_depth;     /* containers nested more than this many levels are refused */
    size_t max_values; /* more values in all are refused; 0: no cap */
} ds_jv_limits;

/* Parses text[0..n) with DS_JV_MAX_DEPTH and no cap on values. NULL with err on any
 * fault ("byte K: ..."). Free with ds_jv_free. */
ds_jv *ds_jv_parse(const char *text, size_t n, ds_err *err);
ds_jv *ds_jv_parse_limits(const char *text, size_t n, const ds_jv_limits *lim, ds_err *err);
void ds_jv_free(ds_jv *v);

/* The first member of object o named key, or NULL (o NULL, not an object, no such key). */
const ds_jv *ds_jv_get(const ds_jv *o, const char *key);

/* Whether v is a string that is also a C string: no decoded NUL inside it to cut it
 * short (v NULL or not a string: 0). */
int ds_jv_is_cstr(const ds_jv *v);

/* Nesting levels of v: 0 for a scalar, 1 for [] or {}, 2 for [[]], ... */
int ds_jv_depth(const ds_jv *v);

/* "null", "a boolean", "a number", "a string", "an array" or "an object", for messages. */
const char *ds_jv_type_name(ds_jv_type t);

/* Writes v through a ds_json writer (the canonical form used for checksums). Integers
 * are written as integers, other numbers as doubles that read back the same; a tree deeper
 * than DS_JSON_MAX_DEPTH sets j->bad. */
void ds_jv_emit(ds_json *j, const ds_jv *v);

#endif
