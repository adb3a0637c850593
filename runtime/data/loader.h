/* The training data loader: (input, target) windows of a token file, deterministic from
 * (seed, step, micro-step) and the same global batch whatever the data-parallel world
 * size (docs/data.md, "Loader").
 *
 * Per micro-step the job draws a global batch of G = batch * world_size windows; window
 * g (0 <= g < G) starts at
 *     h     = mix(mix(mix(mix(seed) ^ step) ^ micro) ^ g)     (mix: splitmix64's step)
 *     start = floor(h * (N - T) / 2^64)                       (N tokens, context T)
 * and holds tokens [start, start + T] : input = the first T, target = the last T. Rank r
 * takes windows [r * batch, (r + 1) * batch). Sampling is stateless: the step is the
 * whole data cursor a checkpoint needs. */
#ifndef DS_LOADER_H
#define DS_LOADER_H

#include <stdint.h>

#include "ds_err.h"
#include "tokfile.h"

typedef struct ds_loader_opts {
    const char *path;
    int64_t context;  /* T */
    int64_t batch;    /* windows per rank per micro-step */
    uint64_t seed;
    int rank, world_size;
    uint32_t vocab;   /* the model's vocabulary; 0: take the file's */
    int validate;     /* scan every token against the vocabulary at open */
} ds_loader_opts;

typedef struct ds_loader {
    ds_tokfile tf;
    int64_t context, batch;
    uint64_t seed;
    int rank, world_size;
    uint32_t vocab;   /* 0: unknown (tokens must then fit int32) */
    uint64_t nstarts; /* N - T */
} ds_loader;

int ds_loader_open(ds_loader *ld, const ds_loader_opts *opts, ds_err *err);
void ds_loader_close(ds_loader *ld);

/* Start of window g of the global batch of (step, micro). */
uint64_t ds_loader_window_start(const ds_loader *ld, uint64_t step, uint64_t micro, uint64_t g);

/* This rank's slice: x and y each hold batch * context int32, row-major [batch][context].
 * A token outside the vocabulary is an error naming the file and its index. */
int ds_loader_batch(const ds_loader *ld, int64_t step, int64_t micro, int32_t *x, int32_t *y,
                    ds_err *err);

#endif
