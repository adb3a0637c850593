/* A tiny streaming JSON writer: objects, arrays, strings, numbers. Strings are escaped
 * so that the output is always valid JSON in valid UTF-8, whatever bytes come in
 * (control characters become \uXXXX, invalid UTF-8 becomes U+FFFD): log lines and
 * host names from users pass through it safely. Commas and nesting are tracked here,
 * so callers only say what comes next.
 *
 *   ds_json j; ds_json_init_file(&j, stdout, 0);
 *   ds_json_obj(&j); ds_json_kint(&j, "step", 3); ds_json_kstr(&j, "host", h);
 *   ds_json_end(&j); ds_json_newline(&j);   -> {"step":3,"host":"..."}\n
 *
 * Output goes to a FILE or to a growing buffer (j.text, a C string; ds_buf_free it). Misuse
 * (a value where a key is due, nesting deeper than DS_JSON_MAX_DEPTH) sets j->bad and
 * is otherwise ignored; an out-of-memory buffer sets j->bad too. */
#ifndef DS_JSON_H
#define DS_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "ds_buf.h"

#define DS_JSON_MAX_DEPTH 32

typedef struct ds_json {
    FILE *out;       /* NULL: write to text */
    ds_buf text;     /* a C string (ds_buf_str) when not bad */
    int pretty;      /* 1: two-space indentation, one member per line */
    int depth;
    int count[DS_JSON_MAX_DEPTH]; /* members written so far at each depth */
    char kind[DS_JSON_MAX_DEPTH]; /* '{' or '[' */
    int key_pending; /* a key was written; its value comes next */
    int bad;
} ds_json;

void ds_json_init_file(ds_json *j, FILE *out, int pretty);
void ds_json_init_buf(ds_json *j, int pretty);

void ds_json_obj(ds_json *j);  /* { */
void ds_json_arr(ds_json *j);  /* [ */
void ds_json_end(ds_json *j);  /* closes the innermost { or [ */
void ds_json_key(ds_json *j, const char *key);

void ds_json_str(ds_json *j, const char *s); /* NULL writes null */
void ds_json_strn(ds_json *j, const char *s, size_t n);
void ds_json_int(ds_json *j, long long v);
void ds_json_num(ds_json *j, double v);      /* NaN and infinities write null */
void ds_json_bool(ds_json *j, int v);
void ds_json_null(ds_json *j);

/* key + value in one call */
void ds_json_kstr(ds_json *j, const char *key, const char *s);
void ds_json_kint(ds_json *j, const char *key, long long v);
void ds_json_knum(ds_json *j, const char *key, double v);
void ds_json_kbool(ds_json *j, const char *key, int v);

/* Writes "\n" (ends a JSON line). */
void ds_json_newline(ds_json *j);

/* Appends s as a quoted, escaped JSON string to a FILE (no writer state needed). */
void ds_json_write_string(FILE *out, const char *s, size_t n);

#endif
