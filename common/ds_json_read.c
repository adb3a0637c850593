#include "ds_json_read.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s;
    size_t n, pos;
    int max_depth;
    size_t max_values, values;
    ds_err *err;
    int failed;
} parser;

/* Only the first fault is reported: callers unwinding after it must not overwrite it. */
static int failv(parser *p, size_t at, int show_found, const char *fmt, va_list ap) {
    if (p->failed) return -1;
    p->failed = 1;
    char what[256];
    vsnprintf(what, sizeof what, fmt, ap);
    if (!show_found) return ds_err_set(p->err, "byte %zu: %s", at, what);
    if (at >= p->n) return ds_err_set(p->err, "byte %zu: %s, found the end of the text", at, what);
    unsigned char c = (unsigned char)p->s[at];
    if (c >= 0x20 && c < 0x7f) return ds_err_set(p->err, "byte %zu: %s, found '%c'", at, what, c);
    return ds_err_set(p->err, "byte %zu: %s, found byte 0x%02x", at, what, c);
}

/* A fault at the current position, naming the character found there. */
__attribute__((format(printf, 2, 3))) static int fail(parser *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(p, p->pos, 1, fmt, ap);
    va_end(ap);
    return -1;
}

__attribute__((format(printf, 3, 4))) static int fail_at(parser *p, size_t at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    failv(p, at, 0, fmt, ap);
    va_end(ap);
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int literal(parser *p, const char *word) {
    size_t k = strlen(word);
    if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k) != 0)
        return fail(p, "expected a JSON value");
    p->pos += k;
    return 0;
}

static int digits(parser *p, const char *what) {
    if (p->pos >= p->n || !is_digit(p->s[p->pos])) return fail(p, "%s", what);
    while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    return 0;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, converted by strtod/strtoll on a
 * NUL-terminated copy (the text itself need not be terminated). */
static int parse_number(parser *p, ds_jv *v) {
    size_t start = p->pos;
    int integral = 1;
    v->type = DS_JV_NUM;
    if (p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->n && is_digit(p->s[p->pos])) return fail(p, "leading zero in a number");
    } else if (digits(p, "expected a digit")) {
        return -1;
    }
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (digits(p, "expected a digit after '.'")) return -1;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (digits(p, "expected a digit in the exponent")) return -1;
    }
    size_t len = p->pos - start;
    char small[72];
    char *buf = len < sizeof small ? small : malloc(len + 1);
    if (!buf) return fail_at(p, start, "out of memory");
    memcpy(buf, p->s + start, len);
    buf[len] = '\0';
    v->num = strtod(buf, NULL);
    if (integral) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->inum = i;
        }
    }
    if (buf != small) free(buf);
    if (!isfinite(v->num)) return fail_at(p, start, "number out of range (beyond a double)");
    return 0;
}

static int hex4(parser *p, unsigned *out) {
    if (p->n - p->pos < 4) return fail(p, "expected 4 hex digits after \\u");
    unsigned u = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) return fail(p, "expected a hex digit in \\u escape");
        u = u * 16 + d;
        p->pos++;
    }
    *out = u;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The code point of a \u escape (p at the 'u'), pairing surrogates. */
static int unicode_escape(parser *p, unsigned *cp) {
    p->pos++;
    if (hex4(p, cp)) return -1;
    if (*cp >= 0xdc00 && *cp <= 0xdfff) {
        p->pos -= 4;
        return fail(p, "lone low surrogate in \\u escape");
    }
    if (*cp < 0xd800 || *cp > 0xdbff) return 0;
    unsigned lo;
    if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u')
        return fail(p, "high surrogate not followed by a \\u low surrogate");
    p->pos += 2;
    if (hex4(p, &lo)) return -1;
    if (lo < 0xdc00 || lo > 0xdfff) {
        p->pos -= 4;
        return fail(p, "expected a low surrogate");
    }
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return 0;
}

/* One escape (p at the backslash) decoded into o; the number of bytes written, or -1. */
static int escape(parser *p, char *o, int is_key) {
    size_t at = p->pos++;
    unsigned cp;
    switch (p->s[p->pos]) {
    case '"': cp = '"'; break;
    case '\\': cp = '\\'; break;
    case '/': cp = '/'; break;
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
        if (unicode_escape(p, &cp)) return -1;
        if (cp == 0 && is_key) return fail_at(p, at, "\\u0000 inside a key");
        return (int)put_utf8(o, cp);
    default: return fail(p, "bad escape in string");
    }
    p->pos++;
    *o = (char)cp;
    return 1;
}

/* Decodes the string at p (its opening quote). The decoded form is never longer than
 * the source, so the raw length up to the closing quote bounds the one allocation. */
static int parse_string(parser *p, char **out, size_t *out_len, int is_key) {
    size_t end = ++p->pos;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) {
        p->pos = p->n;
        return fail(p, "unterminated string");
    }
    char *o = malloc(end - p->pos + 1);
    if (!o) return fail_at(p, p->pos, "out of memory");
    size_t k = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c < 0x20) {
            free(o);
            return fail(p, "control character inside a string");
        }
        if (c != '\\') {
            o[k++] = (char)c;
            p->pos++;
            continue;
        }
        int w = escape(p, o + k, is_key);
        if (w < 0) {
            free(o);
            return -1;
        }
        k += (size_t)w;
    }
    p->pos++;
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return 0;
}

static int parse_value(parser *p, ds_jv *v, int depth);

/* Members grow by doubling; items and keys stay parallel arrays. */
static int push_member(parser *p, ds_jv *v, size_t *cap) {
    if (v->len < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    ds_jv *items = realloc(v->items, nc * sizeof *items);
    if (!items) return fail_at(p, p->pos, "out of memory");
    v->items = items;
    if (v->type == DS_JV_OBJ) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (!keys) return fail_at(p, p->pos, "out of memory");
        v->keys = keys;
    }
    *cap = nc;
    return 0;
}

static int parse_key(parser *p, ds_jv *obj) {
    skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, "expected a key (a string)");
    size_t klen;
    char *key;
    if (parse_string(p, &key, &klen, 1)) return -1;
    obj->keys[obj->len] = key;
    obj->len++; /* counted now so that ds_jv_free releases the key on failure */
    skip_ws(p);
    if (p->pos >= p->n || p->s[p->pos] != ':') return fail(p, "expected ':' after a key");
    p->pos++;
    return 0;
}

static int parse_container(parser *p, ds_jv *v, int depth) {
    char close = p->s[p->pos] == '{' ? '}' : ']';
    v->type = close == '}' ? DS_JV_OBJ : DS_JV_ARR;
    if (depth >= p->max_depth) return fail(p, "JSON nested too deeply (more than %d levels)", p->max_depth);
    p->pos++;
    size_t cap = 0;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (push_member(p, v, &cap)) return -1;
        ds_jv *item = &v->items[v->len];
        memset(item, 0, sizeof *item);
        if (v->type == DS_JV_OBJ) {
            if (parse_key(p, v)) return -1;
        } else {
            v->len++;
        }
        if (parse_value(p, item, depth + 1)) return -1;
        skip_ws(p);
        if (p->pos < p->n && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        if (p->pos >= p->n || p->s[p->pos] != ',') return fail(p, "expected ',' or '%c'", close);
        p->pos++;
    }
}

static int parse_value(parser *p, ds_jv *v, int depth) {
    skip_ws(p);
    v->at = p->pos;
    if (p->max_values && ++p->values > p->max_values)
        return fail_at(p, p->pos, "more than %zu JSON values", p->max_values);
    if (p->pos >= p->n) return fail(p, "expected a JSON value");
    char c = p->s[p->pos];
    switch (c) {
    case '{':
    case '[': return parse_container(p, v, depth);
    case '"': v->type = DS_JV_STR; return parse_string(p, &v->str, &v->len, 0);
    case 't': v->type = DS_JV_BOOL; v->boolean = 1; return literal(p, "true");
    case 'f': v->type = DS_JV_BOOL; return literal(p, "false");
    case 'n': v->type = DS_JV_NULL; return literal(p, "null");
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, v);
        return fail(p, "expected a JSON value");
    }
}

static void free_members(ds_jv *v) {
    if (v->type == DS_JV_STR) free(v->str);
    if (v->type != DS_JV_ARR && v->type != DS_JV_OBJ) return;
    for (size_t i = 0; i < v->len; i++) {
        free_members(&v->items[i]);
        if (v->type == DS_JV_OBJ) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

ds_jv *ds_jv_parse_limits(const char *text, size_t n, const ds_jv_limits *lim, ds_err *err) {
    parser p = {.s = text, .n = n, .max_depth = lim->max_depth, .max_values = lim->max_values,
                .err = err};
    ds_jv *v = calloc(1, sizeof *v);
    if (!v) return ds_err_set(err, "out of memory"), NULL;
    if (parse_value(&p, v, 0) == 0) {
        skip_ws(&p);
        if (p.pos == p.n) return v;
        fail(&p, "only whitespace may follow the value");
    }
    free_members(v);
    free(v);
    return NULL;
}

ds_jv *ds_jv_parse(const char *text, size_t n, ds_err *err) {
    ds_jv_limits lim = {.max_depth = DS_JV_MAX_DEPTH, .max_values = 0};
    return ds_jv_parse_limits(text, n, &lim, err);
}

void ds_jv_free(ds_jv *v) {
    if (!v) return;
    free_members(v);
    free(v);
}

const ds_jv *ds_jv_get(const ds_jv *o, const char *key) {
    if (!o || o->type != DS_JV_OBJ) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

int ds_jv_depth(const ds_jv *v) {
    if (v->type != DS_JV_ARR && v->type != DS_JV_OBJ) return 0;
    int d = 0;
    for (size_t i = 0; i < v->len; i++) {
        int k = ds_jv_depth(&v->items[i]);
        if (k > d) d = k;
    }
    return d + 1;
}

int ds_jv_is_cstr(const ds_jv *v) {
    return v && v->type == DS_JV_STR && strlen(v->str) == v->len;
}

const char *ds_jv_type_name(ds_jv_type t) {
    switch (t) {
    case DS_JV_NULL: return "null";
    case DS_JV_BOOL: return "a boolean";
    case DS_JV_NUM: return "a number";
    case DS_JV_STR: return "a string";
    case DS_JV_ARR: return "an array";
    case DS_JV_OBJ: return "an object";
    }
    return "?";
}

void ds_jv_emit(ds_json *j, const ds_jv *v) {
    switch (v->type) {
    case DS_JV_NULL: ds_json_null(j); break;
    case DS_JV_BOOL: ds_json_bool(j, v->boolean); break;
    case DS_JV_NUM:
        if (v->is_int) ds_json_int(j, v->inum);
        else ds_json_num(j, v->num);
        break;
    case DS_JV_STR: ds_json_strn(j, v->str, v->len); break;
    case DS_JV_ARR:
    case DS_JV_OBJ:
        if (v->type == DS_JV_OBJ) ds_json_obj(j);
        else ds_json_arr(j);
        for (size_t i = 0; i < v->len; i++) {
            if (v->type == DS_JV_OBJ) ds_json_key(j, v->keys[i]);
            ds_jv_emit(j, &v->items[i]);
        }
        ds_json_end(j);
        break;
    }
}
