/* safetensors: the reader. The header is parsed against the format's schema (no general
 * JSON tree): an object of tensor entries and an optional "__metadata__" object of
 * strings. Unknown keys inside a tensor entry are skipped as the reference does, with a
 * nesting limit, so hostile input cannot recurse deeply or allocate without bound. */
#include "safetensors.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytetok.h"
#include "ds_mapfile.h"

#define SKIP_MAX_DEPTH 64

struct ds_st_file {
    ds_mapfile file; /* what ds_st_open mapped; empty for ds_st_parse */
    ds_st_tensor *tensors; /* sorted by name */
    size_t n, cap;
    ds_st_kv *meta; /* sorted by key */
    size_t nmeta, meta_cap;
};

typedef struct parser {
    const char *s;
    size_t n, pos;
    ds_err *err;
} parser;

static int perr(parser *p, const char *what) {
    if (p->pos >= p->n) return ds_err_set(p->err, "header: unexpected end of JSON, %s", what);
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c >= 0x20 && c < 0x7f)
        return ds_err_set(p->err, "header byte %zu: %s, found '%c'", p->pos, what, c);
    return ds_err_set(p->err, "header byte %zu: %s, found byte 0x%02x", p->pos, what, c);
}

static void ws(parser *p) {
    while (p->pos < p->n && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                             p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int expect(parser *p, char c, const char *what) {
    ws(p);
    if (p->pos >= p->n || p->s[p->pos] != c) return perr(p, what);
    p->pos++;
    return 0;
}

/* Peeks the next non-space byte; -1 at the end. */
static int peek(parser *p) {
    ws(p);
    return p->pos < p->n ? (unsigned char)p->s[p->pos] : -1;
}

static int hex4(parser *p, unsigned *out) {
    if (p->n - p->pos < 4) return perr(p, "expected 4 hex digits after \\u");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos];
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                   : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                   : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
        if (d == 16) return perr(p, "expected a hex digit in \\u escape");
        v = v * 16 + d;
        p->pos++;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 63)),
               o[2] = (char)(0x80 | (cp & 63)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 63));
    o[2] = (char)(0x80 | (cp >> 6 & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A JSON string, decoded into a malloc'ed NUL-terminated copy (NULL: only validate). The
 * header was checked to be UTF-8 already; a decoded NUL is refused (names are C strings). */
static int string(parser *p, char **out) {
    if (expect(p, '"', "expected a string") != 0) return -1;
    size_t start = p->pos;
    char *o = NULL;
    if (out) {
        /* Decoding never grows the text (an escape is at least as long as what it makes),
         * so the raw length up to the closing quote bounds the copy. */
        size_t end = start;
        while (end < p->n && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
        o = malloc(end - start + 1);
        if (!o) return ds_err_set(p->err, "out of memory");
    }
    size_t k = 0;
    for (;;) {
        if (p->pos >= p->n) {
            free(o);
            return perr(p, "unterminated string");
        }
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') break;
        if (c < 0x20) {
            free(o);
            return perr(p, "control character inside a string");
        }
        p->pos++;
        if (c != '\\') {
            if (o) o[k++] = (char)c;
            continue;
        }
        if (p->pos >= p->n) {
            perr(p, "unterminated string");
            goto fail;
        }
        char e = p->s[p->pos++];
        unsigned cp;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(p, &cp) != 0) goto fail;
            if (cp >= 0xDC00 && cp <= 0xDFFF) {
                p->pos -= 4;
                perr(p, "lone low surrogate in \\u escape");
                goto fail;
            }
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (p->n - p->pos < 2 || p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
                    perr(p, "high surrogate not followed by a \\u low surrogate");
                    goto fail;
                }
                p->pos += 2;
                if (hex4(p, &lo) != 0) goto fail;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    p->pos -= 4;
                    perr(p, "expected a low surrogate");
                    goto fail;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) {
                p->pos -= 6;
                perr(p, "\\u0000 inside a string");
                goto fail;
            }
            break;
        default:
            p->pos--;
            perr(p, "bad escape in string");
            goto fail;
        }
        if (o) k += put_utf8(o + k, cp);
    }
    p->pos++; /* the closing quote */
    if (o) {
        o[k] = '\0';
        *out = o;
    }
    return 0;
fail:
    free(o);
    return -1;
}

/* A non-negative integer without sign, fraction or exponent, at most 2^63 - 1. */
static int uint_value(parser *p, uint64_t *out, const char *what) {
    ws(p);
    size_t start = p->pos;
    uint64_t v = 0;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
        unsigned d = (unsigned)(p->s[p->pos] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) {
            p->pos = start;
            return perr(p, "integer too large");
        }
        v = v * 10 + d;
        p->pos++;
    }
    if (p->pos == start) return perr(p, what);
    if (p->s[start] == '0' && p->pos - start > 1) {
        p->pos = start;
        return perr(p, "leading zero in an integer");
    }
    if (p->pos < p->n && (p->s[p->pos] == '.' || p->s[p->pos] == 'e' || p->s[p->pos] == 'E'))
        return perr(p, "expected an integer (no fraction or exponent)");
    *out = v;
    return 0;
}

static int literal(parser *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->pos < len || memcmp(p->s + p->pos, word, len) != 0)
        return perr(p, "expected a JSON value");
    p->pos += len;
    return 0;
}

static int digits(parser *p) {
    size_t start = p->pos;
    while (p->pos < p->n && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    return p->pos > start ? 0 : perr(p, "expected a digit");
}

/* Any JSON number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int skip_number(parser *p) {
    if (p->pos < p->n && p->s[p->pos] == '-') p->pos++;
    if (p->pos < p->n && p->s[p->pos] == '0') p->pos++;
    else if (digits(p) != 0) return perr(p, "expected a JSON value");
    if (p->pos < p->n && p->s[p->pos] == '.') {
        p->pos++;
        if (digits(p) != 0) return -1;
    }
    if (p->pos < p->n && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->n && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        if (digits(p) != 0) return -1;
    }
    return 0;
}

/* Skips any JSON value (for keys the format does not define), depth-limited. */
static int skip_value(parser *p, int depth) {
    if (depth > SKIP_MAX_DEPTH) return perr(p, "JSON nested too deeply");
    int c = peek(p);
    if (c == '"') return string(p, NULL);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        p->pos++;
        if (peek(p) == close) return p->pos++, 0;
        for (;;) {
            if (c == '{' && (string(p, NULL) != 0 || expect(p, ':', "expected ':'") != 0))
                return -1;
            if (skip_value(p, depth + 1) != 0) return -1;
            int d = peek(p);
            if (d == close) return p->pos++, 0;
            if (d != ',') return perr(p, c == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
            p->pos++;
        }
    }
    if (c == 't') return literal(p, "true");
    if (c == 'f') return literal(p, "false");
    if (c == 'n') return literal(p, "null");
    return skip_number(p);
}

typedef struct entry_seen {
    int dtype, shape, offsets;
} entry_seen;

static int tensor_entry(parser *p, ds_st_tensor *t, uint64_t off[2]) {
    entry_seen seen = {0, 0, 0};
    if (expect(p, '{', "expected '{' starting a tensor entry") != 0) return -1;
    if (peek(p) == '}') return perr(p, "empty tensor entry (dtype, shape, data_offsets required)");
    for (;;) {
        char *key;
        size_t key_at = (ws(p), p->pos);
        if (string(p, &key) != 0) return -1;
        if (expect(p, ':', "expected ':' after a key") != 0) return free(key), -1;
        int rc = 0, dup = 0;
        if (!strcmp(key, "dtype")) {
            dup = seen.dtype++;
            size_t at = (ws(p), p->pos);
            char *d;
            rc = string(p, &d);
            if (rc == 0) {
                if (ds_st_dtype_parse(d, strlen(d), &t->dtype) != 0) {
                    p->pos = at;
                    rc = ds_err_set(p->err, "header byte %zu: unknown dtype \"%.40s\"", at, d);
                }
                free(d);
            }
        } else if (!strcmp(key, "shape")) {
            dup = seen.shape++;
            rc = expect(p, '[', "expected '[' starting the shape");
            t->ndim = 0;
            if (rc == 0 && peek(p) == ']') p->pos++;
            else
                while (rc == 0) {
                    uint64_t v;
                    if (t->ndim == DS_ST_MAX_DIMS) {
                        rc = perr(p, "shape has more than 8 dimensions");
                        break;
                    }
                    rc = uint_value(p, &v, "expected a dimension size");
                    if (rc) break;
                    t->shape[t->ndim++] = (int64_t)v;
                    int c = peek(p);
                    p->pos++;
                    if (c == ']') break;
                    if (c != ',') p->pos--, rc = perr(p, "expected ',' or ']' in the shape");
                }
        } else if (!strcmp(key, "data_offsets")) {
            dup = seen.offsets++;
            rc = expect(p, '[', "expected '[' starting data_offsets");
            if (rc == 0) rc = uint_value(p, &off[0], "expected the begin offset");
            if (rc == 0) rc = expect(p, ',', "expected ',' between the two data_offsets");
            if (rc == 0) rc = uint_value(p, &off[1], "expected the end offset");
            if (rc == 0) rc = expect(p, ']', "expected ']': data_offsets holds two integers");
        } else {
            rc = skip_value(p, 1);
        }
        if (rc == 0 && dup)
            rc = ds_err_set(p->err, "header byte %zu: key \"%s\" given twice", key_at, key);
        free(key);
        if (rc) return -1;
        int c = peek(p);
        if (c == '}') break;
        if (c != ',') return perr(p, "expected ',' or '}' in a tensor entry");
        p->pos++;
    }
    p->pos++;
    if (!seen.dtype || !seen.shape || !seen.offsets)
        return ds_err_set(p->err, "header byte %zu: tensor entry lacks %s", p->pos - 1,
                          !seen.dtype ? "\"dtype\"" : !seen.shape ? "\"shape\"" : "\"data_offsets\"");
    return 0;
}

static int add_tensor(ds_st_file *f, ds_err *err) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        ds_st_tensor *t = realloc(f->tensors, cap * sizeof *t);
        if (!t) return ds_err_set(err, "out of memory");
        f->tensors = t;
        f->cap = cap;
    }
    memset(&f->tensors[f->n], 0, sizeof f->tensors[0]);
    return 0;
}

static int add_meta(ds_st_file *f, char *k, char *v, ds_err *err) {
    if (f->nmeta == f->meta_cap) {
        size_t cap = f->meta_cap ? f->meta_cap * 2 : 8;
        ds_st_kv *m = realloc(f->meta, cap * sizeof *m);
        if (!m) return free(k), free(v), ds_err_set(err, "out of memory");
        f->meta = m;
        f->meta_cap = cap;
    }
    f->meta[f->nmeta++] = (ds_st_kv){k, v};
    return 0;
}

static int metadata(parser *p, ds_st_file *f) {
    if (peek(p) == 'n') return literal(p, "null"); /* the reference takes null as none */
    if (expect(p, '{', "expected '{' starting __metadata__") != 0) return -1;
    if (peek(p) == '}') return p->pos++, 0;
    for (;;) {
        char *k, *v;
        if (string(p, &k) != 0) return -1;
        if (expect(p, ':', "expected ':' after a key") != 0) return free(k), -1;
        if (peek(p) != '"') return free(k), perr(p, "__metadata__ values must be strings");
        if (string(p, &v) != 0) return free(k), -1;
        if (add_meta(f, k, v, p->err) != 0) return -1;
        int c = peek(p);
        if (c == '}') return p->pos++, 0;
        if (c != ',') return perr(p, "expected ',' or '}' in __metadata__");
        p->pos++;
    }
}

static int header(parser *p, ds_st_file *f, uint64_t (**offs)[2]) {
    size_t ocap = 0;
    int seen_meta = 0;
    if (expect(p, '{', "the header must be a JSON object") != 0) return -1;
    if (peek(p) != '}')
        for (;;) {
            char *key;
            size_t key_at = (ws(p), p->pos);
            if (string(p, &key) != 0) return -1;
            if (expect(p, ':', "expected ':' after a key") != 0) return free(key), -1;
            if (!strcmp(key, "__metadata__")) {
                free(key);
                if (seen_meta++)
                    return ds_err_set(p->err, "header byte %zu: __metadata__ given twice", key_at);
                if (metadata(p, f) != 0) return -1;
            } else {
                if (add_tensor(f, p->err) != 0) return free(key), -1;
                if (f->n == ocap) {
                    ocap = ocap ? ocap * 2 : 16;
                    uint64_t(*o)[2] = realloc(*offs, ocap * sizeof *o);
                    if (!o) return free(key), ds_err_set(p->err, "out of memory");
                    *offs = o;
                }
                ds_st_tensor *t = &f->tensors[f->n];
                t->name = key;
                f->n++; /* counted now, so close() frees the name on error */
                if (tensor_entry(p, t, (*offs)[f->n - 1]) != 0)
                    return ds_err_prefix(p->err, "tensor '%.200s'", key);
            }
            int c = peek(p);
            if (c == '}') break;
            if (c != ',') return perr(p, "expected ',' or '}' after an entry");
            p->pos++;
        }
    p->pos++;
    ws(p); /* the padding */
    if (p->pos != p->n) return perr(p, "only spaces may follow the header object");
    return 0;
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
    parser p = {.s = h, .n = hlen, .pos = 0, .err = err};
    int rc = header(&p, f, &offs);
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
