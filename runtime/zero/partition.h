/* How ZeRO splits a stage's flat buffer over the data-parallel ranks: evenly, padded.
 * With n real elements over N ranks every shard holds s = ceil(n / N) elements; rank r
 * owns flat elements [r*s, min((r+1)*s, n)) and the rest of its shard is padding (zero
 * by convention), so the padded buffer of N*s elements all-gathers and reduce-scatters
 * in equal pieces (comm.h). Per-parameter ranges of the flat buffer intersect a shard
 * in at most one piece each, which is how an optimizer applies per-parameter options
 * (weight decay on or off) to the part of a parameter that its rank owns. */
#ifndef DS_PARTITION_H
#define DS_PARTITION_H

#include <stdint.h>

#include "ds_err.h"

typedef struct ds_partition {
    int64_t numel;  /* real elements in the flat buffer */
    int world;      /* ranks it is split over */
    int64_t shard;  /* elements per rank, padding included: ceil(numel / world) */
    int64_t padded; /* shard * world: the length to allocate for a gathered buffer */
} ds_partition;

/* numel >= 0, world >= 1; else -1 with err. */
int ds_partition_make(int64_t numel, int world, ds_partition *p, ds_err *err);

/* First flat element of rank's shard (rank * shard; may be >= numel: all padding). */
int64_t ds_partition_begin(const ds_partition *p, int rank);
/* Real (non-padding) elements in rank's shard, 0..shard. */
int64_t ds_partition_real(const ds_partition *p, int rank);
/* The rank owning flat element i (0 <= i < numel). */
int ds_partition_owner(const ds_partition *p, int64_t i);

/* The overlap of the flat range [off, off + len) (say, one parameter) with rank's real
 * elements. len == 0 when they do not overlap (the other fields are 0 then). */
typedef struct ds_shard_slice {
    int64_t flat_off;  /* where the overlap starts in the flat buffer */
    int64_t shard_off; /* ... and in rank's shard */
    int64_t range_off; /* ... and inside the range [off, off + len) */
    int64_t len;       /* elements in the overlap */
} ds_shard_slice;

ds_shard_slice ds_partition_intersect(const ds_partition *p, int rank, int64_t off,
                                      int64_t len);

#endif
