/* ZeRO over a model's stages: data-parallel training where each stage chooses how much
 * of its model state is sharded over the ranks (stage->opts.zero):
 *
 *   0  every rank keeps everything; gradients are all-reduced (averaged) at the
 *      accumulation boundary and every rank runs the same full optimizer step.
 *   1  Adam moments exist only for the rank's shard of the flat buffer; gradients are
 *      reduce-scattered (averaged) to their owner at the boundary; each rank updates its
 *      shard and the updated shards are all-gathered back into the full parameters.
 *   2  as 1, but the full gradient buffer lives only while the stage's backward runs
 *      (a "gradient window"): right after it, it is reduce-scattered in buckets into the
 *      rank's persistent gradient shard (accumulating over micro-batches) and freed.
 *   3  as 2, and the parameters too are kept only as the rank's shard: the full
 *      parameters (a "parameter window") are all-gathered before the stage's forward and
 *      again before its backward and freed after; the next stage's gather is started
 *      before the current stage computes, so it overlaps the compute.
 *
 * A stage's flat buffer is split with partition.h; shards are padded to equal length.
 * A layer that uses a parameter tied to another stage (GPT's head uses the token
 * embedding) makes that stage a dependency: its parameters (3) and gradient window (2, 3)
 * are there whenever the using stage runs.
 *
 * The caller (lua/ds/model.lua) drives one training step as:
 *   zero_grad; per micro-batch: for k: before_forward(k), stage forward, after_forward(k);
 *   criterion; for k down: before_backward(k), stage backward, after_backward(k);
 *   then reduce (boundary), grad_sumsq -> clip with scale_grads, adamw/sgd.
 * Every rank makes the same calls in the same order (the collectives are matched by
 * order). Results are deterministic; the global gradient norm and the averaged loss are
 * summed in rank order, so every rank holds bit-identical values. */
#ifndef DS_ZERO_H
#define DS_ZERO_H

#include <stddef.h>

#include "comm.h"
#include "optim.h"
#include "partition.h"
#include "stage.h"

/* Default bucket for the ZeRO-2/3 gradient reduce-scatter, in elements (all ranks'
 * pieces together): two such buffers (comm category) exist while a window reduces. */
#define DS_ZERO_BUCKET_ELEMS (1 << 20)

typedef struct ds_zero_stage {
    ds_stage *s;
    int zero;                  /* the stage's ZeRO stage, as it chose it */
    /* What the stage shards, set once from `zero`: every choice below follows these. */
    int shards_optim;          /* 1..3: moments and master weights only for [lo, hi) */
    int shards_grads;          /* 2, 3: gradients live as a window in backward, kept as a shard */
    int shards_params;         /* 3: parameters kept as a shard, gathered around compute */
    ds_partition part;
    int64_t lo, hi;            /* the rank's real elements of the flat buffer: [lo, hi) */
    ds_tensor *param_shard;    /* 3: the rank's parameters (params category) */
    ds_tensor *grad_shard;     /* 2, 3: the rank's reduced gradients (grads category) */
    ds_tensor *m, *v, *mom;    /* 1..3: optimizer state for the shard (made on first use) */
    ds_tensor *master;         /* 1..3, 16-bit stages: fp32 master weights of the shard */
    ds_comm_handle *gather;    /* 3: all-gather in flight into s->flat_params */
    int gathered;              /* 3: s->flat_params holds the full parameters */
    int *deps;                 /* stages whose parameters this one's layers use, itself first */
    int ndeps;
} ds_zero_stage;

/* A gradient bucket still on the wire when its stage's backward hook returned: it is
 * added into stage k's shard at [j, j + c) when the next hook needs the buckets or the
 * gradients (so the reduction overlaps the next stage's backward). */
typedef struct ds_zero_pending {
    ds_comm_handle *h;
    int k, b;
    int64_t j, c;
} ds_zero_pending;

typedef struct ds_zero {
    ds_comm *comm;
    int rank, world;
    ds_zero_stage *st;
    int n;
    size_t bucket_elems;
    ds_tensor *bucket[2]; /* comm category, made on first use */
    ds_zero_pending pending[2]; /* in the order they were started */
    int npending;
    int no_prefetch;      /* 1: ZeRO-3 gathers only when needed (to measure the overlap) */
} ds_zero;

/* Takes the model's stages in order (not owned; they must outlive z) and re-lays their
 * buffers for their ZeRO stage: padded full buffers for 0..2, shards for 2 and 3.
 * Collective over comm; the parameters are broadcast from rank 0 first. bucket_elems 0:
 * DS_ZERO_BUCKET_ELEMS. */
ds_zero *ds_zero_new(ds_comm *comm, ds_stage **stages, int n, size_t bucket_elems,
                     ds_err *err);
/* Waits any gather in flight. NULL is allowed. */
void ds_zero_free(ds_zero *z);

int ds_zero_before_forward(ds_zero *z, int k, ds_err *err);
int ds_zero_after_forward(ds_zero *z, int k, ds_err *err);
int ds_zero_before_backward(ds_zero *z, int k, ds_err *err);
int ds_zero_after_backward(ds_zero *z, int k, ds_err *err);

/* Start of a step: zeroes every gradient this rank keeps. */
int ds_zero_zero_grad(ds_zero *z, ds_err *err);
/* Accumulation boundary: all-reduce (0) / reduce-scatter (1) the gradients, averaged. */
int ds_zero_reduce(ds_zero *z, ds_err *err);
/* Sum of squares of the whole model's reduced gradients (every rank gets the same). */
int ds_zero_grad_sumsq(ds_zero *z, double *out, ds_err *err);
/* Multiplies every gradient this rank will use by k (clipping). */
int ds_zero_scale_grads(ds_zero *z, float k, ds_err *err);
/* One optimizer step on the rank's shards with the gradients multiplied by grad_scale
 * (clipping, loss-scale removal), then the parameters are made whole again (all-gather
 * for 1 and 2; 3 keeps its shard). 16-bit stages step their fp32 master shards (made from
 * the working copy on first use) and round them into the working copy. */
int ds_zero_adamw(ds_zero *z, const ds_adamw_cfg *c, float grad_scale, ds_err *err);
int ds_zero_sgd(ds_zero *z, const ds_sgd_cfg *c, float grad_scale, ds_err *err);
/* The mean of x over the ranks, summed in rank order. */
int ds_zero_mean(ds_zero *z, double x, double *out, ds_err *err);
/* Every rank arrives before any leaves (a checkpoint's commit). */
int ds_zero_barrier(ds_zero *z, ds_err *err);
/* Stage k's full parameters gathered (3) so they can be read; ds_zero_release_params
 * frees them again. No-ops for 0..2. */
int ds_zero_gather_params(ds_zero *z, int k, ds_err *err);
void ds_zero_release_params(ds_zero *z, int k);
/* After writing stage k's gathered parameters (loading weights): the rank's slice goes
 * back into its shard, the truth for ZeRO-3, and master weights that exist are made again
 * from the written working copy. Every rank must have written the same. */
int ds_zero_store_params(ds_zero *z, int k, ds_err *err);
/* 16-bit stage k's fp32 master weights as this rank keeps them (full at ZeRO 0, else the
 * shard [lo, hi)), made from the working copy if missing: what a checkpoint saves as the
 * stage's parameters. NULL with err for an fp32 stage. */
ds_tensor *ds_zero_master(ds_zero *z, int k, ds_err *err);
/* After masters were loaded: the working copy rounded from them (collective for ZeRO 1
 * and 2, which all-gather it). No-op for fp32 stages. */
int ds_zero_masters_to_params(ds_zero *z, int k, ds_err *err);

#endif
