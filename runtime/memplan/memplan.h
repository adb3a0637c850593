/* The memory planner: from a model's description alone (its stages' layers and shapes,
 * no tensor allocated) and a job (world size, micro-batch, accumulation, optimizer,
 * device), each rank's peak bytes per allocation category, line by line, for a choice
 * of ZeRO stage, activation checkpointing and precision per stage, and what that choice
 * costs (recompute FLOPs, bytes communicated, step time). docs/memory.md explains every
 * line; the grid test proves them against the allocation counters.
 *
 * How: the planner replays, with sizes only, the allocations a training run makes in
 * the order the engine makes them (stage construction, ZeRO's re-layout, then training
 * steps: the hooks of runtime/zero/zero.c around each stage's forward and backward, each
 * layer's outputs, saved tensors and scratch, checkpoint spans released and recomputed,
 * the criterion, the optimizer's state on the first step), keeping the current and peak
 * bytes of every line. Each allocation belongs to one line (ds_mp_line), each line to
 * one counter category; the peak of the total is where a memory limit bites. A change to
 * what the engine allocates must be made here too: the grid test fails otherwise. */
#ifndef DS_MEMPLAN_H
#define DS_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "kernel_table.h" /* ds_gemm16_form */
#include "stage.h"

/* The lines of a prediction, each counted in one category. */
typedef enum ds_mp_line {
    DS_MP_PARAMS,        /* params: the working copy (full, or ZeRO-3's shard) */
    DS_MP_PARAM_WINDOWS, /* params: ZeRO-3's gathered parameters */
    DS_MP_GRADS,         /* grads: full, or ZeRO-2/3's shard */
    DS_MP_GRAD_WINDOWS,  /* grads: ZeRO-2/3's full gradients while a stage's backward runs */
    DS_MP_MASTERS,       /* optimizer: fp32 master weights of 16-bit stages */
    DS_MP_MOMENTS,       /* optimizer: AdamW's m and v, or SGD's momentum */
    DS_MP_ACT_KEPT,      /* activations: outputs and saved tensors kept for backward */
    DS_MP_ACT_GRADS,     /* activations: gradients at layer boundaries, stage inputs, logits */
    DS_MP_RECOMPUTE,     /* activations: a checkpointed span's working set */
    DS_MP_SCRATCH,       /* workspace: attention's backward scratch */
    DS_MP_IMAGES,        /* workspace: a 16-bit layer's kernel workspace and the fp32
                            copies of its 16-bit input and output, or the fp32 images
                            of a layer whose parameters mix formats (one buffer) */
    DS_MP_INIT,          /* workspace: fp32 staging of a parameter while stages are built */
    DS_MP_BUCKETS,       /* comm: ZeRO-2/3 reduce-scatter buckets */
    DS_MP_RING,          /* comm: Gloo's reduce-scatter receive ring */
    DS_MP_DATA,          /* data: a micro-batch's inputs and targets */
    DS_MP_NLINES
} ds_mp_line;

const char *ds_mp_line_name(ds_mp_line l);
ds_mem_cat ds_mp_line_cat(ds_mp_line l);
/* The formula of a line, in words and symbols (docs/memory.md has the same). */
const char *ds_mp_line_formula(ds_mp_line l);

/* One stage's choice ('auto' is resolved in Lua, lua/ds/memplan.lua, by predicting each
 * candidate). */
typedef struct ds_mp_choice {
    int zero;       /* 0..3 */
    int checkpoint; /* 0 none, N >= 1 spans of N layers */
    int precision;  /* ds_dtype: DS_F32, DS_BF16, DS_F16 */
} ds_mp_choice;

typedef enum ds_mp_optim { DS_MP_ADAMW, DS_MP_SGD } ds_mp_optim;

/* The run around the model. */
typedef struct ds_mp_job {
    int world;                     /* data-parallel ranks */
    int batch_ndim;                /* the first stage's input, per rank and micro-batch */
    int64_t batch[4];
    ds_dtype batch_dtype;          /* int32 token ids, or fp32 features */
    int64_t targets;               /* criterion targets per micro-batch (int32) */
    int accum;                     /* micro-batches per step */
    ds_mp_optim optim;
    int64_t bucket_elems;          /* ZeRO-2/3 bucket (0: the engine's default) */
    int prefetch;                  /* ZeRO-3 gathers the next stage ahead */
    int host_device;               /* 1: the rank computes on the host (no staging copies) */
    int gloo;                      /* 1: collectives over Gloo (a ring buffer at world > 1) */
    ds_gemm16_form gemm16;         /* the device's 16-bit Linear workspace (kernel_table.h) */
    ds_attn16_form attn16;         /* the device's 16-bit fused attention workspace (same) */
    /* The node's speeds, for the step time (0: no time predicted). */
    double gemm_flops;             /* per rank, FLOP/s of the rank's GEMM */
    double link_bytes_s;           /* per rank, bytes/s its collectives move */
} ds_mp_job;

/* A model: its stages in order (real or described: only the layers and the flat layout
 * are read) with a cross-entropy criterion on the last stage's output. */
typedef struct ds_mp_model {
    ds_stage *const *stages;
    int n;
} ds_mp_model;

typedef struct ds_mp_pred {
    size_t line_at_peak[DS_MP_NLINES]; /* each line when the total peaked */
    size_t line_peak[DS_MP_NLINES];    /* each line's own peak */
    size_t cat_at_peak[DS_MEM_NCAT];
    size_t cat_peak[DS_MEM_NCAT];      /* what ds.memory() reports as a category's peak */
    size_t cat_after[DS_MEM_NCAT];     /* held after the last step (ds.memory().current) */
    size_t total_peak;
    char peak_at[96];                  /* where the total peaked: "step 2, backward of 'h'" */
    /* Cost of one optimizer step, per rank. */
    double flops;                      /* forward + backward */
    double recompute_flops;            /* checkpointed spans' second forward */
    double comm_bytes;                 /* the ZeRO paper's volumes (docs/memory.md) */
    double step_s;                     /* from the job's speeds; 0 when they are not given */
} ds_mp_pred;

/* Predicts the peak bytes of a rank for choice[k] per stage (no field 'auto') after
 * `steps` training steps (2 reach the steady state: the optimizer's state exists from
 * the first). -1 with err for a layer kind or shape the planner does not know. */
int ds_mp_predict(const ds_mp_model *m, const ds_mp_choice *choice, const ds_mp_job *job,
                  int steps, ds_mp_pred *out, ds_err *err);

#endif
