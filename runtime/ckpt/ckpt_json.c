#include "ckpt_json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *s;
    size_t n, pos;
    ds_err *err;
    int failed;
} parser;

static int fail(parser *p, const char *what) {
    if (!p->failed) ds_err_set(p->err, "offset %zu: %s", p->pos, what);
    p->failed = 1;
    return -1;
}

static void skip_ws(parser *p) {
    while (p->pos < p->n) {
        char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int literal(parser *p, const char *word) {
    size_t k = strlen(word);
    if (p->n - p->pos < k || memcmp(p->s + p->pos, word, k) != 0)
        return fail(p, "unexpected character");
    p->pos += k;
    return 0;
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int parse_number(parser *p, ds_ckj *v) {
    size_t start = p->pos;
    int integral = 1;
    if (p->pos < p->n && p->s[p->pos] == '-') p->pos++;
    if (p->pos >= p->n || !is_digit(p->s[p->pos])) return fail(p, "bad number");
    if (p->s[p->pos] == '0') p->pos++;
    else while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '.') {
        integral = 0;
        p->pos++;
        if (p->pos >= p->n || !is_digit(p->s[p->pos])) return fail(p, "bad number");
        while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        integral = 0;
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (p->pos >= p->n || !is_digit(p->s[p->pos])) return fail(p, "bad number");
        while (p->pos < p->n && is_digit(p->s[p->pos])) p->pos++;
    }
    size_t len = p->pos - start;
    if (len > 64) return fail(p, "number too long");
    char buf[72];
    memcpy(buf, p->s + start, len);
    buf[len] = '\0';
    v->type = CKJ_NUM;
    v->num = strtod(buf, NULL);
    if (!isfinite(v->num)) return fail(p, "number out of range");
    if (integral) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (errno == 0) {
            v->is_int = 1;
            v->inum = i;
        }
    }
    return 0;
}

static int hex4(parser *p, unsigned *out) {
    if (p->n - p->pos < 4) return fail(p, "truncated \\u escape");
    unsigned u = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        u <<= 4;
        if (c >= '0' && c <= '9') u |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') u |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') u |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad \\u escape");
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

/* Decodes a string starting after its opening quote. The decoded form is never longer
 * than the source, so one allocation of the remaining input bounds it. */
static int parse_string(parser *p, char **out, size_t *out_len) {
    size_t end = p->pos;
    while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->n) return fail(p, "unterminated string");
    char *o = malloc(end - p->pos + 1);
    if (!o) return fail(p, "out of memory");
    size_t k = 0;
    while (p->s[p->pos] != '"') {
        unsigned char c = (unsigned char)p->s[p->pos++];
        if (c < 0x20) { free(o); return fail(p, "control character in string"); }
        if (c != '\\') { o[k++] = (char)c; continue; }
        char e = p->s[p->pos++];
        switch (e) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (hex4(p, &cp)) { free(o); return -1; }
            if (cp >= 0xd800 && cp < 0xdc00) {
                unsigned lo;
                if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    free(o);
                    return fail(p, "lone surrogate in \\u escape");
                }
                p->pos += 2;
                if (hex4(p, &lo)) { free(o); return -1; }
                if (lo < 0xdc00 || lo > 0xdfff) { free(o); return fail(p, "bad surrogate pair"); }
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            } else if (cp >= 0xdc00 && cp < 0xe000) {
                free(o);
                return fail(p, "lone surrogate in \\u escape");
            }
            k += put_utf8(o + k, cp); /* \uXXXX is 6 source bytes, at most 4 out */
            break;
        }
        default: free(o); return fail(p, "bad escape");
        }
    }
    p->pos++; /* closing quote */
    o[k] = '\0';
    *out = o;
    *out_len = k;
    return 0;
}

static int parse_value(parser *p, ds_ckj *v, int depth);

/* Members grow by doubling; items and keys stay parallel arrays. */
static int push_member(parser *p, ds_ckj *v, size_t *cap) {
    if (v->len < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    ds_ckj *items = realloc(v->items, nc * sizeof *items);
    if (!items) return fail(p, "out of memory");
    v->items = items;
    if (v->type == CKJ_OBJ) {
        char **keys = realloc(v->keys, nc * sizeof *keys);
        if (!keys) return fail(p, "out of memory");
        v->keys = keys;
    }
    *cap = nc;
    return 0;
}

static int parse_container(parser *p, ds_ckj *v, int depth) {
    char close = p->s[p->pos] == '{' ? '}' : ']';
    v->type = close == '}' ? CKJ_OBJ : CKJ_ARR;
    if (depth >= DS_CKJ_MAX_DEPTH) return fail(p, "nested too deeply");
    p->pos++;
    size_t cap = 0;
    skip_ws(p);
    if (p->pos < p->n && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    for (;;) {
        if (push_member(p, v, &cap)) return -1;
        ds_ckj *item = &v->items[v->len];
        memset(item, 0, sizeof *item);
        if (v->type == CKJ_OBJ) {
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != '"') return fail(p, "expected a key");
            p->pos++;
            size_t klen;
            char *key;
            if (parse_string(p, &key, &klen)) return -1;
            v->keys[v->len] = key;
            v->len++; /* counted now so that ds_ckj_free releases the key on failure */
            skip_ws(p);
            if (p->pos >= p->n || p->s[p->pos] != ':') return fail(p, "expected ':'");
            p->pos++;
        } else {
            v->len++;
        }
        if (parse_value(p, item, depth + 1)) return -1;
        skip_ws(p);
        if (p->pos >= p->n) return fail(p, "unexpected end of input");
        char c = p->s[p->pos++];
        if (c == close) return 0;
        if (c != ',') return fail(p, "expected ',' or a closing bracket");
    }
}

static int parse_value(parser *p, ds_ckj *v, int depth) {
    skip_ws(p);
    if (p->pos >= p->n) return fail(p, "unexpected end of input");
    char c = p->s[p->pos];
    switch (c) {
    case '{':
    case '[': return parse_container(p, v, depth);
    case '"':
        p->pos++;
        v->type = CKJ_STR;
        return parse_string(p, &v->str, &v->len);
    case 't': v->type = CKJ_BOOL; v->boolean = 1; return literal(p, "true");
    case 'f': v->type = CKJ_BOOL; return literal(p, "false");
    case 'n': v->type = CKJ_NULL; return literal(p, "null");
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, v);
        return fail(p, "unexpected character");
    }
}

static void free_members(ds_ckj *v) {
    if (v->type == CKJ_STR) free(v->str);
    if (v->type != CKJ_ARR && v->type != CKJ_OBJ) return;
    for (size_t i = 0; i < v->len; i++) {
        free_members(&v->items[i]);
        if (v->type == CKJ_OBJ) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

ds_ckj *ds_ckj_parse(const char *text, size_t n, ds_err *err) {
    parser p = {.s = text, .n = n, .err = err};
    ds_ckj *v = calloc(1, sizeof *v);
    if (!v) return ds_err_set(err, "out of memory"), NULL;
    if (parse_value(&p, v, 0) == 0) {
        skip_ws(&p);
        if (p.pos == p.n) return v;
        fail(&p, "trailing characters after the value");
    }
    free_members(v);
    free(v);
    return NULL;
}

void ds_ckj_free(ds_ckj *v) {
    if (!v) return;
    free_members(v);
    free(v);
}

const ds_ckj *ds_ckj_get(const ds_ckj *o, const char *key) {
    if (!o || o->type != CKJ_OBJ) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

int ds_ckj_depth(const ds_ckj *v) {
    if (v->type != CKJ_ARR && v->type != CKJ_OBJ) return 0;
    int d = 0;
    for (size_t i = 0; i < v->len; i++) {
        int k = ds_ckj_depth(&v->items[i]);
        if (k > d) d = k;
    }
    return d + 1;
}

void ds_ckj_emit(ds_json *j, const ds_ckj *v) {
    switch (v->type) {
    case CKJ_NULL: ds_json_null(j); break;
    case CKJ_BOOL: ds_json_bool(j, v->boolean); break;
    case CKJ_NUM:
        if (v->is_int) ds_json_int(j, v->inum);
        else ds_json_num(j, v->num);
        break;
    case CKJ_STR: ds_json_strn(j, v->str, v->len); break;
    case CKJ_ARR:
    case CKJ_OBJ:
        if (v->type == CKJ_OBJ) ds_json_obj(j);
        else ds_json_arr(j);
        for (size_t i = 0; i < v->len; i++) {
            if (v->type == CKJ_OBJ) ds_json_key(j, v->keys[i]);
            ds_ckj_emit(j, &v->items[i]);
        }
        ds_json_end(j);
        break;
    }
}
