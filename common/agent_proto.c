#include "agent_proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int ds_frame_append(ds_buf *out, int type, uint32_t rank, const void *payload, size_t len) {
    if (len > DS_FRAME_MAX_PAYLOAD) return -1;
    if (ds_buf_put_u8(out, (uint8_t)type) != 0 || ds_buf_put_u32(out, rank) != 0 ||
        ds_buf_put_u32(out, (uint32_t)len) != 0)
        return -1;
    return ds_buf_put(out, payload, len);
}

static int known_type(int t) {
    return (t >= DS_FRAME_CONFIG && t <= DS_FRAME_FILE_DATA) || (t >= DS_FRAME_HELLO && t <= DS_FRAME_RELAY_DONE);
}

int ds_frame_parse(const ds_buf *in, ds_frame *f) {
    const unsigned char *p = ds_buf_head(in);
    size_t have = ds_buf_unread(in);
    if (have < DS_FRAME_HEADER) return 0;
    int type = p[0];
    uint32_t len = get_u32(p + 5);
    if (!known_type(type) || len > DS_FRAME_MAX_PAYLOAD) return -1;
    if (have < DS_FRAME_HEADER + (size_t)len) return 0;
    f->type = type;
    f->rank = get_u32(p + 1);
    f->payload = p + DS_FRAME_HEADER;
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
