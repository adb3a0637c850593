/* A growable byte buffer, the one the whole project uses: output waiting for a socket,
 * input not yet parsed into frames, text being built (JSON, a safetensors header).
 *
 * The unread bytes are [off, len): consuming from the front only moves off, and the
 * consumed front is reclaimed when the buffer would otherwise grow, so a long-lived
 * connection's buffer stays the size of its largest frame. The bytes are always followed
 * by a NUL once anything was added, so text built here is a C string at data + off.
 *
 * A put that runs out of memory returns -1 and sets oom, which stays set: a builder can
 * add many pieces and check once at the end, while a connection's buffer can still take
 * the next frame once memory is back. Positions kept across puts must be relative to off
 * (the front is reclaimed by moving the unread bytes down). */
#ifndef DS_BUF_H
#define DS_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds_buf {
    uint8_t *data;
    size_t off, len, cap; /* unread: [off, len); cap excludes the terminating NUL */
    int oom;
} ds_buf;

/* Room for extra more bytes after len. -1 (and oom) when out of memory. */
int ds_buf_reserve(ds_buf *b, size_t extra);
int ds_buf_put(ds_buf *b, const void *p, size_t n);
int ds_buf_puts(ds_buf *b, const char *s);
int ds_buf_printf(ds_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Big-endian integers (the wire protocols' byte order). */
int ds_buf_put_u8(ds_buf *b, uint8_t v);
int ds_buf_put_u32(ds_buf *b, uint32_t v);
int ds_buf_put_u64(ds_buf *b, uint64_t v);
/* Drops n unread bytes from the front / all of them. */
void ds_buf_consume(ds_buf *b, size_t n);
void ds_buf_clear(ds_buf *b);
void ds_buf_free(ds_buf *b);

static inline const uint8_t *ds_buf_head(const ds_buf *b) { return b->data + b->off; }
static inline size_t ds_buf_unread(const ds_buf *b) { return b->len - b->off; }
/* The unread bytes as a C string ("" for an empty buffer). */
static inline const char *ds_buf_str(const ds_buf *b) {
    return b->data ? (const char *)b->data + b->off : "";
}

#endif
