/* TensorBoard event files, written by hand: the format is small and stable. A file is a
 * sequence of TFRecords (u64 length, masked CRC-32C of the length, the bytes, masked
 * CRC-32C of the bytes; little-endian), each an `Event` protocol buffer: the first says
 * file_version "brain.Event:2", then one per step with a `Summary` of scalar values
 * (tag + simple_value). `tensorboard --logdir DIR` shows every directory holding such a
 * file as a run. */
#ifndef DS_TFEVENTS_H
#define DS_TFEVENTS_H

#include <stdint.h>

#include "ds_err.h"

typedef struct ds_tfevents ds_tfevents;

typedef struct ds_tf_scalar {
    const char *tag;
    float value;
} ds_tf_scalar;

/* Creates (or truncates) dir/events.out.tfevents.<unix seconds>.<host> and writes its
 * first event. */
ds_tfevents *ds_tfevents_open(const char *dir, ds_err *err);
/* The file's path (for messages). */
const char *ds_tfevents_path(const ds_tfevents *w);
/* One event: the scalars of one step at wall_time (Unix seconds). Flushed, so a running
 * TensorBoard sees it. -1 with err when the file could not be written (later calls fail
 * at once). */
int ds_tfevents_write(ds_tfevents *w, int64_t step, double wall_time, const ds_tf_scalar *v, int n, ds_err *err);
void ds_tfevents_close(ds_tfevents *w);

/* The TFRecord checksum: CRC-32C rotated right by 15 bits plus 0xa282ead8. */
uint32_t ds_tfrecord_masked_crc(const void *p, size_t n);

#endif
