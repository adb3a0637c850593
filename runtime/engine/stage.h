/* A stage: an ordered list of layers with its own options, whose parameters and
 * gradients live in ONE flat contiguous buffer each (what ZeRO shards: a shard is a range
 * of the flat buffer). The parameter table (name, offset, size, shape, decay flag) says
 * what each range of the buffer is, so an optimizer can work on any sub-range. */
#ifndef DS_STAGE_H
#define DS_STAGE_H

#include "layer.h"

typedef struct ds_stage_opts {
    int zero;           /* 0..3: what ZeRO shards of this stage (runtime/zero) */
    int checkpoint;     /* 0: none; N >= 1: checkpoint spans of N consecutive layers */
    ds_dtype precision; /* fp32 | bf16 | fp16: the working copy's type */
} ds_stage_opts;

typedef struct ds_stage {
    char name[64];
    ds_stage_opts opts;
    uint64_t seed;
    ds_layer *root;    /* sequential over the layers, checkpoint spans inserted */
    ds_layer **layers; /* the script's layers in order (inside root; not owned): what
                        * the memory planner spans with checkpoints of its own choosing */
    int nlayers;
    int described;     /* 1: a description (ds_stage_describe): no buffers, no compute */
    ds_param **params; /* the parameters this stage owns, in flat-buffer order */
    int nparams;
    size_t numel;      /* flat buffer length, alignment padding included */
    /* The working copy and its gradients, in the stage's precision (fp32, bf16, fp16). */
    ds_tensor *flat_params, *flat_grads;
    ds_tensor *adam_m, *adam_v, *momentum; /* optimizer state, made on first use */
    /* 16-bit stages: fp32 master weights (optimizer category), made from the working copy
     * by the first optimizer step; the step updates them and rounds them into the copy. */
    ds_tensor *master;
    ds_tensor *grad_in;        /* d(input) of the last backward */
    const ds_tensor *last_in;  /* input of the last forward, on the rank's device */
    ds_tensor *in_staged;      /* a host input copied to the device (token ids) */
    ds_tensor *dout_staged;    /* a host gradient given to backward, copied to the device */
    ds_run run;                /* keys of the last forward */
    /* 1: the output in the stage's 16-bit format where its last layer can write it
     * (ds_layer_plan_last): what ds.Model asks of its last stage for a CrossEntropy, so
     * the logits are 16-bit. 0 (a stage on its own): the output is fp32. */
    int half_output;
} ds_stage;

/* Parameters start on 16-element boundaries inside the flat buffer. */
#define DS_PARAM_ALIGN 16

/* Takes ownership of layers[0..n) (also on failure). Assigns names and RNG ids, lays out
 * and allocates the flat buffers and initialises the parameters from seed: each
 * parameter's values depend only on (seed, its name), not on how the model is staged. */
ds_stage *ds_stage_new(const char *name, ds_layer **layers, int n, const ds_stage_opts *opts,
                       uint64_t seed, ds_err *err);
void ds_stage_free(ds_stage *s);
/* The same stage as a description only, for the memory planner: names, the parameter
 * table and the flat layout (numel) as ds_stage_new makes them, but no buffer is
 * allocated, nothing initialised and no checkpoint span inserted (the planner spans
 * s->layers as each choice it predicts would). Forward, backward and the optimizer
 * refuse it. */
ds_stage *ds_stage_describe(const char *name, ds_layer **layers, int n, const ds_stage_opts *opts,
                            uint64_t seed, ds_err *err);

static inline int ds_stage_is_half(const ds_stage *s) { return s->opts.precision != DS_F32; }
/* Points every parameter at its slice of the flat buffers (NULL where one is released):
 * after the buffers are re-laid or released (ZeRO). */
void ds_stage_bind_params(ds_stage *s);
/* 16-bit stages' full-length fp32 master weights (ZeRO keeps its own shard instead); both
 * are no-ops for fp32 stages. ensure makes them from the working copy when missing;
 * refresh makes existing ones again from it after weights were written into the copy
 * (else the next step would undo the write), and does nothing when there are none. */
int ds_stage_ensure_master(ds_stage *s, ds_err *err);
int ds_stage_refresh_master(ds_stage *s, ds_err *err);

int ds_stage_forward(ds_stage *s, const ds_tensor *in, const ds_run *r, ds_err *err);
static inline const ds_tensor *ds_stage_output(const ds_stage *s) { return s->root->out; }
/* Asks for (on = 1) or refuses a 16-bit output from the next forward on (half_output). */
static inline void ds_stage_half_output(ds_stage *s, int on) { s->half_output = on != 0; }
/* Backward of the last forward; afterwards s->grad_in holds d(input), or is NULL when the
 * input was int32 token ids. */
int ds_stage_backward(ds_stage *s, const ds_tensor *dout, ds_err *err);
void ds_stage_zero_grad(ds_stage *s);
/* Frees every activation buffer (they come back with the next forward). */
void ds_stage_release(ds_stage *s);

/* p's initial values, as ds_stage_new draws them, into out (host, p->numel floats). */
void ds_param_init(const ds_param *p, uint64_t seed, float *out);

#endif
