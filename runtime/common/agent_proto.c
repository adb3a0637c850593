#include "agent_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ds_bytes_append(ds_bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *d = realloc(b->data, cap);
        if (!d) return -1;
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void ds_bytes_consume(ds_bytes *b, size_t n) {
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

void ds_bytes_free(ds_bytes *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int ds_frame_append(ds_bytes *out, int type, uint32_t rank, const void *payload, size_t len) {
    if (len > DS_FRAME_MAX_PAYLOAD) return -1;
    unsigned char h[DS_FRAME_HEADER];
    h[0] = (unsigned char)type;
    put_u32(h + 1, rank);
    put_u32(h + 5, (uint32_t)len);
    if (ds_bytes_append(out, h, sizeof h) != 0) return -1;
    return ds_bytes_append(out, payload, len);
}

static int known_type(int t) {
    return (t >= DS_FRAME_CONFIG && t <= DS_FRAME_GO) || (t >= DS_FRAME_HELLO && t <= DS_FRAME_BYE);
}

int ds_frame_parse(const ds_bytes *in, ds_frame *f) {
    if (in->len < DS_FRAME_HEADER) return 0;
    int type = in->data[0];
    uint32_t len = get_u32(in->data + 5);
    if (!known_type(type) || len > DS_FRAME_MAX_PAYLOAD) return -1;
    if (in->len < DS_FRAME_HEADER + (size_t)len) return 0;
    f->type = type;
    f->rank = get_u32(in->data + 1);
    f->payload = in->data + DS_FRAME_HEADER;
    f->len = len;
    return 1;
}

int ds_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}
