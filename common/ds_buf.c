#include "ds_buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_buf_reserve(ds_buf *b, size_t extra) {
    if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
    if (b->len + extra <= b->cap) return 0;
    if (b->off > 0) { /* reclaim the consumed front before growing */
        memmove(b->data, b->data + b->off, b->len - b->off + 1);
        b->len -= b->off;
        b->off = 0;
        if (b->len + extra <= b->cap) return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *d = realloc(b->data, cap + 1);
    if (!d) {
        b->oom = 1;
        return -1;
    }
    b->data = d;
    b->cap = cap;
    b->data[b->len] = '\0';
    return 0;
}

int ds_buf_put(ds_buf *b, const void *p, size_t n) {
    if (ds_buf_reserve(b, n) != 0) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int ds_buf_puts(ds_buf *b, const char *s) { return ds_buf_put(b, s, strlen(s)); }

int ds_buf_printf(ds_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || ds_buf_reserve(b, (size_t)n) != 0) return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int ds_buf_put_u8(ds_buf *b, uint8_t v) { return ds_buf_put(b, &v, 1); }

int ds_buf_put_u32(ds_buf *b, uint32_t v) {
    uint8_t p[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    return ds_buf_put(b, p, 4);
}

int ds_buf_put_u64(ds_buf *b, uint64_t v) {
    if (ds_buf_put_u32(b, (uint32_t)(v >> 32)) != 0) return -1;
    return ds_buf_put_u32(b, (uint32_t)v);
}

void ds_buf_consume(ds_buf *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
    if (b->data) b->data[b->len] = '\0';
}

void ds_buf_clear(ds_buf *b) { ds_buf_consume(b, ds_buf_unread(b)); }

void ds_buf_free(ds_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}
