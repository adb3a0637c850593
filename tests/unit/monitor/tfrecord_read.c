#include "tfrecord_read.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t tf_crc32c(const void *p, size_t n) {
    const unsigned char *b = p;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= b[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t masked(const void *p, size_t n) {
    uint32_t c = tf_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int failf(char *why, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* A protocol buffer cursor. */
typedef struct pb {
    const unsigned char *p, *end;
} pb;

static int varint(pb *b, uint64_t *v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (b->p >= b->end) return -1;
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* The next field: its number, wire type and (for length-delimited) a cursor over it;
 * fixed-size values in *fixed. 1 a field, 0 the end, -1 malformed. */
static int field(pb *b, int *num, int *wire, pb *sub, uint64_t *fixed) {
    if (b->p == b->end) return 0;
    uint64_t key, len;
    if (varint(b, &key) != 0) return -1;
    *num = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: return varint(b, fixed) == 0 ? 1 : -1;
    case 1:
        if (b->end - b->p < 8) return -1;
        *fixed = le(b->p, 8);
        b->p += 8;
        return 1;
    case 5:
        if (b->end - b->p < 4) return -1;
        *fixed = le(b->p, 4);
        b->p += 4;
        return 1;
    case 2:
        if (varint(b, &len) != 0 || len > (uint64_t)(b->end - b->p)) return -1;
        sub->p = b->p;
        sub->end = b->p + len;
        b->p += len;
        return 1;
    }
    return -1;
}

static int push(tf_events *e, long long step, double wall, const char *tag, size_t taglen, float v) {
    if (e->n % 256 == 0) {
        tf_scalar *nv = realloc(e->v, (size_t)(e->n + 256) * sizeof *nv);
        if (!nv) return -1;
        e->v = nv;
    }
    tf_scalar *s = &e->v[e->n++];
    s->step = step;
    s->wall_time = wall;
    snprintf(s->tag, sizeof s->tag, "%.*s", (int)taglen, tag);
    s->value = v;
    return 0;
}

/* Value { 1: tag, 2: simple_value } */
static int value(pb v, tf_events *e, long long step, double wall) {
    const char *tag = NULL;
    size_t taglen = 0;
    int have = 0, num, wire;
    float f = 0;
    pb sub;
    uint64_t x;
    for (int r; (r = field(&v, &num, &wire, &sub, &x)) != 0;) {
        if (r < 0) return -1;
        if (num == 1 && wire == 2) tag = (const char *)sub.p, taglen = (size_t)(sub.end - sub.p);
        if (num == 2 && wire == 5) {
            uint32_t u = (uint32_t)x;
            memcpy(&f, &u, 4);
            have = 1;
        }
    }
    return tag && have ? push(e, step, wall, tag, taglen, f) : -1;
}

/* Event { 1: wall_time, 2: step, 3: file_version, 5: summary { 1: value (repeated) } } */
static int event(pb ev, tf_events *e, int first) {
    double wall = 0;
    long long step = 0;
    pb summary = {0}, sub;
    int has_summary = 0, num, wire;
    uint64_t x;
    for (int r; (r = field(&ev, &num, &wire, &sub, &x)) != 0;) {
        if (r < 0) return -1;
        if (num == 1 && wire == 1) memcpy(&wall, &x, 8);
        else if (num == 2 && wire == 0) step = (long long)x;
        else if (num == 3 && wire == 2 && first)
            snprintf(e->version, sizeof e->version, "%.*s", (int)(sub.end - sub.p), (const char *)sub.p);
        else if (num == 5 && wire == 2) summary = sub, has_summary = 1;
    }
    if (!has_summary) return 0;
    for (int r; (r = field(&summary, &num, &wire, &sub, &x)) != 0;)
        if (r < 0 || (num == 1 && wire == 2 && value(sub, e, step, wall) != 0)) return -1;
    return 0;
}

int tf_read(const char *path, tf_events *out, char *why, size_t cap) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rb");
    if (!f) return failf(why, cap, "cannot open %s", path);
    unsigned char head[12], tail[4];
    int rc = 0;
    for (size_t got; rc == 0 && (got = fread(head, 1, 12, f)) > 0; out->nevents++) {
        if (got < 12) { rc = failf(why, cap, "record %d: truncated header", out->nevents); break; }
        uint64_t len = le(head, 8);
        uint32_t want = (uint32_t)le(head + 8, 4), have = masked(head, 8);
        if (want != have) { rc = failf(why, cap, "record %d: length checksum %08x != %08x", out->nevents, want, have); break; }
        if (len > (1u << 26)) { rc = failf(why, cap, "record %d: length %llu", out->nevents, (unsigned long long)len); break; }
        unsigned char *data = malloc(len ? len : 1);
        if (!data || fread(data, 1, len, f) != len || fread(tail, 1, 4, f) != 4) {
            free(data);
            rc = failf(why, cap, "record %d: truncated", out->nevents);
            break;
        }
        want = (uint32_t)le(tail, 4);
        have = masked(data, len);
        if (want != have) rc = failf(why, cap, "record %d: data checksum %08x != %08x", out->nevents, want, have);
        else if (event((pb){data, data + len}, out, out->nevents == 0) != 0)
            rc = failf(why, cap, "record %d: malformed event", out->nevents);
        free(data);
    }
    fclose(f);
    if (rc == 0 && !out->nevents) rc = failf(why, cap, "%s: no records", path);
    return rc;
}

void tf_events_free(tf_events *e) {
    free(e->v);
    memset(e, 0, sizeof *e);
}
