/* The planner's copy of a stage's layer tree: each layer's kind, sizes and the buffers it
 * holds, with the checkpoint spans of the choice being planned inserted as the engine
 * inserts them (stage.c). Buffers are sizes: a slot holds the bytes a tensor of the
 * engine holds, and the line it counts in. */
#ifndef DS_MEMPLAN_TREE_H
#define DS_MEMPLAN_TREE_H

#include "memplan.h"

typedef enum mp_kind {
    MP_LINEAR, MP_EMBEDDING, MP_POSEMB, MP_LAYERNORM, MP_GELU, MP_DROPOUT, MP_ATTENTION,
    MP_SEQUENTIAL, MP_RESIDUAL, MP_CHECKPOINT
} mp_kind;

typedef struct mp_shape {
    int ndim;
    int64_t d[4];
    int f32;  /* 0: int32 ids */
    int half; /* 1: 16-bit floats (a 16-bit stage's activation) */
    int grad_half; /* 1: its gradient at a Sequential boundary is 16-bit too */
} mp_shape;

typedef struct mp_slot {
    size_t bytes;
    int live;
    ds_mp_line line;
} mp_slot;

#define MP_MAX_BUFS 3

typedef struct mp_node {
    mp_kind kind;
    const char *path;       /* for "where the peak is" */
    int in_dim, out_dim, heads;
    int dropout;            /* Dropout, Attention: p > 0 */
    int fused;              /* Dropout: ends a Residual's branch, computes its sum
                             * (ops->forward_add: no output buffer); set by the sim */
    int nparam;
    size_t pnumel[2];       /* parameters the layer uses (tied ones included) */
    int powner[2];          /* their stage, by index in the model */
    struct mp_node **kids;
    int nkids;
    mp_slot out, buf[MP_MAX_BUFS];
    mp_slot *gbuf;          /* Sequential: one per child boundary */
    mp_shape out_shape;
    int out_half;           /* 1: the output is 16-bit (layer.c's ds_layer_plan_outputs) */
    int grad_half;          /* 1: so is its output gradient (layer.c's grad_dtype) */
    int input_only;         /* the layer's ops->input_only: a span ending with it keeps its
                             * output and does not recompute it (layer_containers.c) */
} mp_node;

/* A stage's tree for checkpoint choice `every` (0: none), as a root Sequential over the
 * stage's layers. Nodes come from one arena freed with mp_tree_free. NULL with err for a
 * layer kind the planner does not know. stage_of maps a parameter's owner to its index. */
typedef struct mp_arena mp_arena;
mp_node *mp_tree_build(mp_arena **arena, const ds_stage *s, int every,
                       int (*stage_of)(const void *ctx, const ds_stage *owner), const void *ctx,
                       ds_err *err);
void mp_arena_free(mp_arena *a);

#endif
