#include "store_proto.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

int ds_bytebuf_reserve(ds_bytebuf *b, size_t extra) {
    if (b->off > 0 && b->off == b->len) b->off = b->len = 0;
    if (b->len + extra <= b->cap) return 0;
    /* Reclaim the consumed front before growing: a long-lived connection's buffer
     * stays the size of its largest frame, not of everything it ever received. */
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (b->len + extra <= b->cap) return 0;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

int ds_bytebuf_put(ds_bytebuf *b, const void *p, size_t n) {
    if (ds_bytebuf_reserve(b, n) != 0) return -1;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int ds_bytebuf_put_u8(ds_bytebuf *b, uint8_t v) { return ds_bytebuf_put(b, &v, 1); }

int ds_bytebuf_put_u32(ds_bytebuf *b, uint32_t v) {
    uint8_t p[4];
    ds_store_u32(p, v);
    return ds_bytebuf_put(b, p, 4);
}

int ds_bytebuf_put_u64(ds_bytebuf *b, uint64_t v) {
    uint8_t p[8];
    ds_store_u32(p, (uint32_t)(v >> 32));
    ds_store_u32(p + 4, (uint32_t)v);
    return ds_bytebuf_put(b, p, 8);
}

void ds_bytebuf_consume(ds_bytebuf *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

void ds_bytebuf_free(ds_bytebuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

int ds_frame_begin(ds_bytebuf *b, uint8_t op) {
    if (ds_bytebuf_put_u32(b, 0) != 0) return -1;
    return ds_bytebuf_put_u8(b, op);
}

void ds_frame_end(ds_bytebuf *b, size_t start) {
    ds_store_u32(b->data + start, (uint32_t)(b->len - start - 4));
}

int ds_rd_bytes(ds_reader *r, size_t n, const uint8_t **p) {
    if (r->n < n) return -1;
    *p = r->p;
    r->p += n;
    r->n -= n;
    return 0;
}

int ds_rd_u8(ds_reader *r, uint8_t *v) {
    const uint8_t *p;
    if (ds_rd_bytes(r, 1, &p) != 0) return -1;
    *v = p[0];
    return 0;
}

int ds_rd_u32(ds_reader *r, uint32_t *v) {
    const uint8_t *p;
    if (ds_rd_bytes(r, 4, &p) != 0) return -1;
    *v = ds_load_u32(p);
    return 0;
}

int ds_rd_u64(ds_reader *r, uint64_t *v) {
    const uint8_t *p;
    if (ds_rd_bytes(r, 8, &p) != 0) return -1;
    *v = (uint64_t)ds_load_u32(p) << 32 | ds_load_u32(p + 4);
    return 0;
}

uint32_t ds_load_u32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void ds_store_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

const char *ds_store_key_problem(const uint8_t *key, size_t len) {
    if (len == 0) return "empty key";
    if (len > DS_STORE_MAX_KEY) return "key longer than 4096 bytes";
    if (memchr(key, '\0', len)) return "key contains a NUL byte";
    return NULL;
}

int64_t ds_store_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
