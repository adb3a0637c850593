/* State checkpoints: named logical flat arrays, saved by range from every rank and read
 * back by any range at any world size (resharding). The engine decides what the arrays
 * are ("stage0/params", "stage0/adam_m", ...) and which range each rank saves; this part
 * knows nothing of stages or ZeRO. See docs/checkpoints.md.
 *
 *   <dir>/step-<N>/rank-<r>-of-<W>.bin   one per rank: sections, each checksummed
 *   <dir>/step-<N>/meta.json             written by rank 0 once every shard is durable
 *   <dir>/latest                         "step-<N>", replaced last
 *
 * Saving is collective: every rank calls begin, add for each of its ranges, then commit
 * with the same barrier. Errors on one rank never leave the others waiting: begin and
 * add keep the first error inside the writer, and commit still takes part in both
 * barriers before it reports it. Only rank 0 learns whether meta.json and latest were
 * written; a caller that needs every rank to know broadcasts rank 0's result. */
#ifndef DS_CKPT_H
#define DS_CKPT_H

#include <stdint.h>

#include "ds_err.h"
#include "ds_dtype.h"

/* Waits until every rank has called it; 0, or -1 with err. */
typedef int (*ds_ckpt_barrier_fn)(void *arg, ds_err *err);

typedef struct ds_ckpt_writer ds_ckpt_writer;

/* Starts rank's shard of step `step` under dir (created if needed). Returns NULL only
 * for arguments no rank could use (rank outside [0, world), negative step) or no
 * memory; file system errors are kept for commit. Saving a step that `latest` already
 * names is refused (it would overwrite the checkpoint a restart relies on). */
ds_ckpt_writer *ds_ckpt_writer_begin(const char *dir, int64_t step, int rank, int world,
                                     ds_err *err);

/* Appends elements [begin, end) of the logical array `name` (total_numel elements of
 * dtype) from data, which holds end - begin elements in host memory (device buffers are
 * copied to the host first). Across all ranks the ranges of one
 * array must cover [0, total_numel) exactly once; empty ranges are allowed. The data is
 * written before this returns, so the caller may reuse its buffer. */
int ds_ckpt_writer_add(ds_ckpt_writer *w, const char *name, ds_dtype dtype,
                       uint64_t total_numel, uint64_t begin, uint64_t end, const void *data,
                       ds_err *err);

/* Makes the shard durable, waits at barrier, then (rank 0) checks every shard, writes
 * meta.json with engine_json (a JSON object text, or NULL for {}) and points latest at
 * the new step; waits at barrier again. Frees w. 0, or -1 with err. */
int ds_ckpt_writer_commit(ds_ckpt_writer *w, const char *engine_json, ds_ckpt_barrier_fn barrier,
                          void *arg, ds_err *err);

/* Marks this rank's save as failed for a reason found outside this part (kept like an
 * add error: commit still takes part in the barriers, then reports it). */
void ds_ckpt_writer_fail(ds_ckpt_writer *w, const char *why);

/* Drops an unfinished save (its temporary file is removed) without any barrier. */
void ds_ckpt_writer_abort(ds_ckpt_writer *w);

typedef struct ds_ckpt ds_ckpt;

typedef struct ds_ckpt_array {
    const char *name;
    ds_dtype dtype;
    uint64_t numel;
    uint32_t npieces; /* how many saved ranges it was split into */
} ds_ckpt_array;

/* path is a checkpoint directory (its `latest` is followed) or a step directory. Checks
 * meta.json against every shard's header and section table (sizes, digests), not the
 * payloads: those are checked as they are read. */
ds_ckpt *ds_ckpt_open(const char *path, ds_err *err);
void ds_ckpt_close(ds_ckpt *ck);

const char *ds_ckpt_dir(const ds_ckpt *ck); /* the step directory */
int64_t ds_ckpt_step(const ds_ckpt *ck);
int ds_ckpt_world(const ds_ckpt *ck);        /* the world size that saved it */
/* The engine's JSON object given to commit (compact, NUL-terminated, owned by ck). */
const char *ds_ckpt_meta_extra(const ds_ckpt *ck);

uint32_t ds_ckpt_narrays(const ds_ckpt *ck);
void ds_ckpt_array_at(const ds_ckpt *ck, uint32_t i, ds_ckpt_array *out);
/* 0, or -1 with err naming meta.json when there is no such array. */
int ds_ckpt_array_info(const ds_ckpt *ck, const char *name, ds_ckpt_array *out,
                       ds_err *err);
/* The array exists with this dtype and element count; otherwise -1, saying what differs. */
int ds_ckpt_expect(const ds_ckpt *ck, const char *name, ds_dtype dtype, uint64_t numel,
                   ds_err *err);

/* Copies elements [begin, end) of array name into dst, gathering from every saved range
 * that overlaps and verifying the checksum of every chunk read. */
int ds_ckpt_read_range(ds_ckpt *ck, const char *name, uint64_t begin, uint64_t end,
                       void *dst, ds_err *err);

/* Saved range k (< npieces) of array i: which rank saved elements [begin, end). */
void ds_ckpt_array_range(const ds_ckpt *ck, uint32_t i, uint32_t k, int *rank,
                         uint64_t *begin, uint64_t *end);

/* Rank r's shard file: its path, size and number of sections. */
void ds_ckpt_shard_info(const ds_ckpt *ck, int r, const char **path, uint64_t *bytes,
                        uint32_t *nsections);

/* Reads every byte of rank r's shard (or of every shard) and checks it against its
 * checksums; what `dsrun ckpt inspect` does. */
int ds_ckpt_verify_shard(ds_ckpt *ck, int r, ds_err *err);
int ds_ckpt_verify(ds_ckpt *ck, ds_err *err);

/* The step directory `latest` names under dir: 1 and name filled, 0 when dir has no
 * latest (a fresh run), -1 with err when it is unreadable or malformed. */
int ds_ckpt_latest(const char *dir, char *name, size_t cap, ds_err *err);

#endif
