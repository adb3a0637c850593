/* TensorBoard event files (tfevents.h). The protocol buffer fields used:
 *   Event:   1 wall_time (double), 2 step (int64), 3 file_version (string), 5 summary
 *   Summary: 1 value (repeated Value)
 *   Value:   1 tag (string), 2 simple_value (float) */
#include "tfevents.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "ds_buf.h"
#include "ds_hostname.h"

struct ds_tfevents {
    FILE *f;
    char *path;
    int failed;
    ds_buf rec, msg, sub; /* reused: the record, the event, one nested message */
};

uint32_t ds_tfrecord_masked_crc(const void *p, size_t n) {
    uint32_t c = ds_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protocol buffer pieces (wire types: 0 varint, 1 64-bit, 2 length, 5 32-bit) ---- */

static int put_varint(ds_buf *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return ds_buf_put(b, tmp, (size_t)n);
}

static int put_le(ds_buf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    return ds_buf_put(b, tmp, (size_t)bytes);
}

static int put_key(ds_buf *b, int field, int wire) { return put_varint(b, (uint64_t)(field << 3 | wire)); }

static int put_bytes(ds_buf *b, int field, const void *p, size_t n) {
    return put_key(b, field, 2) | put_varint(b, n) | ds_buf_put(b, p, n);
}

static int put_double(ds_buf *b, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return put_key(b, field, 1) | put_le(b, u, 8);
}

static int put_float(ds_buf *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return put_key(b, field, 5) | put_le(b, u, 4);
}

/* ---- records ---- */

static int write_record(ds_tfevents *w, const ds_buf *data, ds_err *err) {
    if (w->failed) return ds_err_set(err, "%s: not written after an earlier error", w->path);
    uint8_t len[8];
    size_t n = ds_buf_unread(data);
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)n >> (8 * i));
    ds_buf_clear(&w->rec);
    int bad = ds_buf_put(&w->rec, len, 8) | put_le(&w->rec, ds_tfrecord_masked_crc(len, 8), 4) |
              ds_buf_put(&w->rec, ds_buf_head(data), n) | put_le(&w->rec, ds_tfrecord_masked_crc(ds_buf_head(data), n), 4);
    if (bad) {
        w->failed = 1;
        return ds_err_set(err, "%s: out of memory", w->path);
    }
    if (fwrite(ds_buf_head(&w->rec), 1, ds_buf_unread(&w->rec), w->f) != ds_buf_unread(&w->rec) || fflush(w->f) != 0) {
        w->failed = 1;
        return ds_err_errno(err, errno, "%s", w->path);
    }
    return 0;
}

ds_tfevents *ds_tfevents_open(const char *dir, ds_err *err) {
    ds_tfevents *w = calloc(1, sizeof *w);
    char host[256];
    ds_hostname(host, sizeof host, "localhost");
    if (!w || asprintf(&w->path, "%s/events.out.tfevents.%lld.%s", dir, (long long)time(NULL), host) < 0) {
        free(w);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    w->f = fopen(w->path, "wb");
    if (!w->f) {
        ds_err_errno(err, errno, "%s", w->path);
        ds_tfevents_close(w);
        return NULL;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    ds_buf_clear(&w->msg);
    static const char version[] = "brain.Event:2";
    if (put_double(&w->msg, 1, (double)now.tv_sec + now.tv_nsec / 1e9) | put_bytes(&w->msg, 3, version, sizeof version - 1) ||
        write_record(w, &w->msg, err) != 0) {
        if (!err->msg[0]) ds_err_set(err, "out of memory");
        ds_tfevents_close(w);
        return NULL;
    }
    return w;
}

const char *ds_tfevents_path(const ds_tfevents *w) { return w->path; }

int ds_tfevents_write(ds_tfevents *w, int64_t step, double wall_time, const ds_tf_scalar *v, int n, ds_err *err) {
    ds_buf summary = {0};
    int bad = ds_buf_reserve(&summary, 64); /* never a NULL head, even with no values */
    for (int i = 0; i < n; i++) {
        ds_buf_clear(&w->sub);
        bad |= put_bytes(&w->sub, 1, v[i].tag, strlen(v[i].tag)) | put_float(&w->sub, 2, v[i].value);
        bad |= put_bytes(&summary, 1, ds_buf_head(&w->sub), ds_buf_unread(&w->sub));
    }
    ds_buf_clear(&w->msg);
    bad |= put_double(&w->msg, 1, wall_time) | put_key(&w->msg, 2, 0) | put_varint(&w->msg, (uint64_t)step) |
           put_bytes(&w->msg, 5, ds_buf_head(&summary), ds_buf_unread(&summary));
    ds_buf_free(&summary);
    if (bad) return ds_err_set(err, "%s: out of memory", w->path);
    return write_record(w, &w->msg, err);
}

void ds_tfevents_close(ds_tfevents *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w->path);
    ds_buf_free(&w->rec);
    ds_buf_free(&w->msg);
    ds_buf_free(&w->sub);
    free(w);
}
