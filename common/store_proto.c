#include "store_proto.h"

#include <stdlib.h>
#include <string.h>

int ds_frame_begin(ds_buf *b, uint8_t op) {
    if (ds_buf_put_u32(b, 0) != 0) return -1;
    return ds_buf_put_u8(b, op);
}

void ds_frame_end(ds_buf *b, size_t start) {
    ds_store_u32(b->data + b->off + start, (uint32_t)(b->len - b->off - start - 4));
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
