/* Helpers for the checkpoint tests: scratch directories, a model of logical arrays with
 * known contents, simulated and forked ranks that save them. */
#ifndef CKPT_TEST_UTIL_H
#define CKPT_TEST_UTIL_H

#include <stdint.h>

#include "ckpt.h"

/* A fresh directory under $TMPDIR (or /tmp); rm_rf removes it and everything in it. */
char *make_scratch_dir(void);
void rm_rf(const char *path);

/* A logical array whose element i has a value derived from (seed, i). */
typedef struct test_array {
    const char *name;
    ds_dtype dtype;
    uint64_t numel;
    int only_rank0; /* saved whole by rank 0, nothing by the others */
    void *data;
} test_array;

size_t test_esize(ds_dtype t);
void fill_array(test_array *a, uint32_t seed);
void free_arrays(test_array *a, int n);

/* The ZeRO split: shard size ceil(n/W); rank r owns [r*s, min((r+1)*s, n)). */
void zero_range(uint64_t n, int world, int rank, uint64_t *begin, uint64_t *end);

/* Saves arrays from `world` ranks simulated one after another in this process (ranks
 * W-1..1 first, rank 0 last, so rank 0's checks see every shard; a no-op barrier is then
 * correct). Returns rank 0's commit result; err holds the first failure. */
int save_sequential(const char *dir, int64_t step, int world, test_array *a, int n,
                    const char *engine_json, ds_err *err);

/* The same with one forked process per rank and a pipe barrier coordinated by this
 * process. `kill_at` ("rank:point", or NULL) is put in DS_CKPT_TEST_KILL_AT of the
 * children. Fills status[r] with each child's wait status; returns 0 if all exited 0. */
int save_forked(const char *dir, int64_t step, int world, test_array *a, int n,
                const char *kill_at, int *status);

/* Reads all of array a back through views of world size `world` (each view rank reads
 * its zero_range) and compares with a->data; 0 when equal. */
int check_read_as(ds_ckpt *ck, const test_array *a, int world);

void corrupt_byte(const char *path, long offset_from_end);
void truncate_by(const char *path, long bytes);
char *read_text(const char *path);
void write_text(const char *path, const char *text);

#endif
