#include "bytetok.h"
#include "ds_mapfile.h"

#include <string.h>

int ds_docs_mode_parse(const char *s, ds_docs_mode *out) {
    if (!strcmp(s, "none")) *out = DS_DOCS_NONE;
    else if (!strcmp(s, "file")) *out = DS_DOCS_FILE;
    else if (!strcmp(s, "blank")) *out = DS_DOCS_BLANK;
    else return -1;
    return 0;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if it is invalid or cut short. */
static size_t utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;       /* no overlong 3-byte forms */
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) len = 3, hi = 0x9F;       /* no surrogates */
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;       /* no overlong 4-byte forms */
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) len = 4, hi = 0x8F;       /* nothing above U+10FFFF */
    else return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

int ds_utf8_validate(const uint8_t *s, size_t n, size_t *bad) {
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { /* ASCII runs are the common case */
            i++;
            continue;
        }
        size_t len = utf8_seq(s + i, n - i);
        if (!len) {
            *bad = i;
            return -1;
        }
        i += len;
    }
    return 0;
}

/* Batches tokens for the sink, so it is called once per few thousand tokens. */
typedef struct emitter {
    uint32_t buf[4096];
    size_t n;
    ds_token_sink sink;
    void *ctx;
} emitter;

static int emit(emitter *e, uint32_t t, ds_err *err) {
    e->buf[e->n++] = t;
    if (e->n < sizeof e->buf / sizeof e->buf[0]) return 0;
    e->n = 0;
    return e->sink(e->ctx, e->buf, sizeof e->buf / sizeof e->buf[0], err);
}

static int emit_bytes(emitter *e, const uint8_t *s, size_t n, ds_err *err) {
    for (size_t i = 0; i < n; i++)
        if (emit(e, s[i], err) != 0) return -1;
    return 0;
}

static int flush(emitter *e, ds_err *err) {
    size_t n = e->n;
    e->n = 0;
    return n ? e->sink(e->ctx, e->buf, n, err) : 0;
}

static int encode_blank(emitter *e, const uint8_t *s, size_t n, ds_err *err) {
    int in_doc = 0;
    for (size_t i = 0; i < n;) {
        const uint8_t *nl = memchr(s + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - s) + 1 : n; /* the line is s[i..end) */
        size_t content = (nl ? end - 1 : end) - i;
        int blank = content == 0 || (content == 1 && s[i] == '\r');
        if (blank) {
            if (in_doc && emit(e, DS_BYTETOK_EOT, err) != 0) return -1;
            in_doc = 0;
        } else {
            if (emit_bytes(e, s + i, end - i, err) != 0) return -1;
            in_doc = 1;
        }
        i = end;
    }
    return in_doc ? emit(e, DS_BYTETOK_EOT, err) : 0;
}

int ds_bytetok_encode(const uint8_t *s, size_t n, ds_docs_mode mode, ds_token_sink sink,
                      void *ctx, ds_err *err) {
    emitter e = {.n = 0, .sink = sink, .ctx = ctx};
    int rc;
    if (mode == DS_DOCS_BLANK) {
        rc = encode_blank(&e, s, n, err);
    } else {
        rc = emit_bytes(&e, s, n, err);
        if (rc == 0 && mode == DS_DOCS_FILE && n > 0) rc = emit(&e, DS_BYTETOK_EOT, err);
    }
    return rc == 0 ? flush(&e, err) : -1;
}

static int utf8_error(const char *path, const uint8_t *s, size_t bad, ds_err *err) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < bad; i++) {
        if (s[i] == '\n') line++, col = 1;
        else col++;
    }
    return ds_err_set(err, "%s: invalid UTF-8 at byte offset %zu (line %zu, byte column %zu): "
                      "0x%02x (pass --bytes to tokenize any bytes)", path, bad, line, col, s[bad]);
}

int ds_bytetok_encode_file(const char *path, ds_docs_mode mode, int any_bytes,
                           ds_token_sink sink, void *ctx, uint64_t *bytes, ds_err *err) {
    ds_mapfile m;
    if (ds_mapfile_open(&m, path, NULL, err) != 0) return -1;
    const uint8_t *s = m.data ? m.data : (const uint8_t *)"";
    size_t n = m.len;
    *bytes = n;
    size_t bad;
    int rc = 0;
    if (!any_bytes && ds_utf8_validate(s, n, &bad) != 0) rc = utf8_error(path, s, bad, err);
    else rc = ds_bytetok_encode(s, n, mode, sink, ctx, err);
    ds_mapfile_close(&m);
    return rc;
}

const char *ds_bytetok_piece(uint32_t token, const char *eot_text, char *byte, size_t *len,
                             ds_err *err) {
    if (token < 256) {
        *byte = (char)token;
        *len = 1;
        return byte;
    }
    if (token == DS_BYTETOK_EOT) {
        *len = strlen(eot_text);
        return eot_text;
    }
    ds_err_set(err, "token %u is outside the byte-level vocabulary (0..%u)", token,
               DS_BYTETOK_VOCAB - 1);
    return NULL;
}
