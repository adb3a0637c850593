/* A reader of TensorBoard event files for tests, written apart from the writer
 * (launcher/tfevents.c) and sharing none of its code: its own bitwise CRC-32C, its own
 * protocol-buffer decoding. It checks both checksums of every record and refuses
 * anything truncated or malformed. */
#ifndef TFRECORD_READ_H
#define TFRECORD_READ_H

#include <stddef.h>
#include <stdint.h>

typedef struct tf_scalar {
    long long step;
    double wall_time;
    char tag[128];
    float value;
} tf_scalar;

typedef struct tf_events {
    char version[64]; /* the first event's file_version */
    int nevents;      /* records read */
    tf_scalar *v;     /* every scalar of every event, in file order */
    int n;
} tf_events;

/* The CRC-32C of p[0..n) (reflected Castagnoli polynomial, bit by bit). */
uint32_t tf_crc32c(const void *p, size_t n);
/* Reads path. 0, or -1 with why ("record 3: data checksum 0x... != 0x..."). */
int tf_read(const char *path, tf_events *out, char *why, size_t cap);
void tf_events_free(tf_events *e);

#endif
