#include "ds_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void emit(ds_json *j, const char *s, size_t n) {
    if (j->bad || n == 0) return;
    if (j->out) {
        fwrite(s, 1, n, j->out);
        return;
    }
    if (ds_buf_put(&j->text, s, n) != 0) j->bad = 1;
}

static void emits(ds_json *j, const char *s) { emit(j, s, strlen(s)); }

static void indent(ds_json *j) {
    emit(j, "\n", 1);
    for (int i = 0; i < j->depth; i++) emit(j, "  ", 2);
}

void ds_json_init_file(ds_json *j, FILE *out, int pretty) {
    memset(j, 0, sizeof *j);
    j->out = out;
    j->pretty = pretty;
}

void ds_json_init_buf(ds_json *j, int pretty) {
    memset(j, 0, sizeof *j);
    j->pretty = pretty;
    if (ds_buf_reserve(&j->text, 256) != 0) j->bad = 1; /* a C string from the start */
}

/* Called before every value and every key: writes the separator the position needs. */
static void before_item(ds_json *j, int is_key) {
    if (j->depth == 0) return;
    int in_obj = j->kind[j->depth - 1] == '{';
    if (in_obj && !is_key && !j->key_pending) j->bad = 1; /* value without a key */
    if (in_obj && is_key && j->key_pending) j->bad = 1;   /* two keys in a row */
    if (j->key_pending) {
        j->key_pending = 0;
        return; /* the value follows its key directly */
    }
    if (j->count[j->depth - 1]++ > 0) emit(j, ",", 1);
    if (j->pretty) indent(j);
}

static void open_nest(ds_json *j, char kind) {
    before_item(j, 0);
    if (j->depth >= DS_JSON_MAX_DEPTH) {
        j->bad = 1;
        return;
    }
    emit(j, &kind, 1);
    j->kind[j->depth] = kind;
    j->count[j->depth] = 0;
    j->depth++;
}

void ds_json_obj(ds_json *j) { open_nest(j, '{'); }
void ds_json_arr(ds_json *j) { open_nest(j, '['); }

void ds_json_end(ds_json *j) {
    if (j->depth == 0 || j->key_pending) {
        j->bad = 1;
        return;
    }
    j->depth--;
    if (j->pretty && j->count[j->depth] > 0) indent(j);
    emit(j, j->kind[j->depth] == '{' ? "}" : "]", 1);
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. Rejects
 * overlong forms, surrogates and code points above U+10FFFF, as RFC 3629 does. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned min, cp;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) len = 2, min = 0x80, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) len = 3, min = 0x800, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) len = 4, min = 0x10000, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return len;
}

static void string_body(ds_json *j, FILE *out, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        /* copy the longest run that needs no escaping in one go */
        size_t run = 0;
        while (i + run < n) {
            unsigned c = s[i + run];
            if (c < 0x20 || c == '"' || c == '\\') break;
            size_t l = utf8_len(s + i + run, n - i - run);
            if (l == 0) break;
            run += l;
        }
        if (run) {
            if (out) fwrite(s + i, 1, run, out);
            else emit(j, (const char *)s + i, run);
            i += run;
            continue;
        }
        char esc[8];
        unsigned c = s[i];
        switch (c) {
        case '"': strcpy(esc, "\\\""); break;
        case '\\': strcpy(esc, "\\\\"); break;
        case '\n': strcpy(esc, "\\n"); break;
        case '\r': strcpy(esc, "\\r"); break;
        case '\t': strcpy(esc, "\\t"); break;
        case '\b': strcpy(esc, "\\b"); break;
        case '\f': strcpy(esc, "\\f"); break;
        default:
            if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
            else strcpy(esc, "\\ufffd"); /* an invalid UTF-8 byte */
        }
        if (out) fputs(esc, out);
        else emits(j, esc);
        i++;
    }
}

void ds_json_write_string(FILE *out, const char *s, size_t n) {
    fputc('"', out);
    string_body(NULL, out, s, n);
    fputc('"', out);
}

static void quoted(ds_json *j, const char *s, size_t n) {
    emit(j, "\"", 1);
    if (!j->bad) string_body(j, j->out, s, n);
    emit(j, "\"", 1);
}

void ds_json_key(ds_json *j, const char *key) {
    before_item(j, 1);
    if (j->depth == 0 || j->kind[j->depth - 1] != '{') j->bad = 1;
    quoted(j, key, strlen(key));
    emit(j, j->pretty ? ": " : ":", j->pretty ? 2 : 1);
    j->key_pending = 1;
}

void ds_json_strn(ds_json *j, const char *s, size_t n) {
    before_item(j, 0);
    quoted(j, s, n);
}

void ds_json_str(ds_json *j, const char *s) {
    if (!s) {
        ds_json_null(j);
        return;
    }
    ds_json_strn(j, s, strlen(s));
}

void ds_json_int(ds_json *j, long long v) {
    char b[32];
    before_item(j, 0);
    emit(j, b, (size_t)snprintf(b, sizeof b, "%lld", v));
}

void ds_json_num(ds_json *j, double v) {
    if (!isfinite(v)) {
        ds_json_null(j);
        return;
    }
    char b[40];
    before_item(j, 0);
    /* the shortest of %.15g / %.17g that reads back as the same double: 0.1 stays 0.1 */
    int n = snprintf(b, sizeof b, "%.15g", v);
    if (strtod(b, NULL) != v) n = snprintf(b, sizeof b, "%.17g", v);
    emit(j, b, (size_t)n);
}

void ds_json_bool(ds_json *j, int v) {
    before_item(j, 0);
    emits(j, v ? "true" : "false");
}

void ds_json_null(ds_json *j) {
    before_item(j, 0);
    emits(j, "null");
}

void ds_json_kstr(ds_json *j, const char *key, const char *s) { ds_json_key(j, key), ds_json_str(j, s); }
void ds_json_kint(ds_json *j, const char *key, long long v) { ds_json_key(j, key), ds_json_int(j, v); }
void ds_json_knum(ds_json *j, const char *key, double v) { ds_json_key(j, key), ds_json_num(j, v); }
void ds_json_kbool(ds_json *j, const char *key, int v) { ds_json_key(j, key), ds_json_bool(j, v); }

void ds_json_newline(ds_json *j) { emit(j, "\n", 1); }
