/* ds_json string escaping: the output is one JSON string of printable ASCII or valid
 * UTF-8 with no raw control character, and decoding it gives back the input, with each
 * invalid UTF-8 byte replaced by U+FFFD. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_json.h"

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Decodes the JSON string at s (starting at its opening quote) into out. */
static size_t decode(const char *s, size_t n, unsigned char *out) {
    size_t k = 0, i = 1;
    if (n < 2 || s[0] != '"' || s[n - 1] != '"') abort();
    while (i < n - 1) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == '"') abort();
        if (c != '\\') {
            out[k++] = c;
            i++;
            continue;
        }
        char e = s[i + 1];
        i += 2;
        switch (e) {
        case '"': out[k++] = '"'; break;
        case '\\': out[k++] = '\\'; break;
        case 'n': out[k++] = '\n'; break;
        case 'r': out[k++] = '\r'; break;
        case 't': out[k++] = '\t'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'u': {
            unsigned cp = 0;
            for (int d = 0; d < 4; d++) {
                int h = hexval(s[i + d]);
                if (h < 0) abort();
                cp = cp * 16 + (unsigned)h;
            }
            i += 4;
            if (cp < 0x20) out[k++] = (unsigned char)cp;
            else if (cp == 0xfffd) out[k++] = 0xff; /* marker: an invalid byte was here */
            else abort();
            break;
        }
        default: abort();
        }
    }
    return k;
}

/* The input with every byte that is not part of valid UTF-8 replaced by 0xff (which is
 * never valid UTF-8, so it cannot be confused with real text). */
static size_t expected(const unsigned char *s, size_t n, unsigned char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >= 0xe0 && c <= 0xef) ? 3
                   : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
        int ok = len > 0 && i + len <= n;
        unsigned cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t j = 1; ok && j < len; j++) {
            if ((s[i + j] & 0xc0) != 0x80) ok = 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (ok && len > 1) {
            unsigned min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
            if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) ok = 0;
        }
        if (!ok) {
            out[k++] = 0xff;
            i++;
            continue;
        }
        memcpy(out + k, s + i, len);
        k += len;
        i += len;
    }
    return k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 16384) return 0;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_json_strn(&j, (const char *)data, size);
    if (j.bad) abort();
    size_t n = j.text.len;
    unsigned char *got = malloc(n + 1), *want = malloc(size + 1);
    size_t gn = decode(ds_buf_str(&j.text), n, got);
    size_t wn = expected(data, size, want);
    if (gn != wn || memcmp(got, want, gn) != 0) abort();
    free(got);
    free(want);
    ds_buf_free(&j.text);
    return 0;
}
