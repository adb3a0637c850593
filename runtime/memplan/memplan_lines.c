/* The lines of a prediction: name, category, formula (docs/memory.md says the same). */
#include "memplan.h"

static const struct {
    const char *name;
    ds_mem_cat cat;
    const char *formula;
} LINES[DS_MP_NLINES] = {
    [DS_MP_PARAMS] = {"parameters", DS_MEM_PARAMS,
                      "e x (zero 0: numel; 1-2: N x shard; 3: shard) per stage"},
    [DS_MP_PARAM_WINDOWS] = {"ZeRO-3 gather windows", DS_MEM_PARAMS,
                             "e x N x shard of every ZeRO-3 stage gathered at once (the one "
                             "computing, the next prefetched, owners of tied weights)"},
    [DS_MP_GRADS] = {"gradients", DS_MEM_GRADS,
                     "e x (zero 0: numel; 1: N x shard; 2-3: shard) per stage"},
    [DS_MP_GRAD_WINDOWS] = {"ZeRO-2/3 gradient windows", DS_MEM_GRADS,
                            "e x N x shard of every ZeRO-2/3 stage in backward (a tied "
                            "owner's from its user's backward to its own)"},
    [DS_MP_MASTERS] = {"fp32 master weights", DS_MEM_OPTIMIZER,
                       "4 x (zero 0: numel; 1-3: shard) per 16-bit stage"},
    [DS_MP_MOMENTS] = {"optimizer moments", DS_MEM_OPTIMIZER,
                       "AdamW 8, SGD 4, x (zero 0: numel; 1-3: shard) per stage"},
    [DS_MP_ACT_KEPT] = {"activations kept for backward", DS_MEM_ACTIVATIONS,
                        "4 x the outputs and saved tensors of every layer outside checkpointed "
                        "spans (Linear B.T.out, LayerNorm B.T.d + 2.B.T, Attention B.T.d + "
                        "B.H.T, with attention dropout too, ...), each span's output, "
                        "the loss per row; 2 x for 16-bit ones (between 16-bit layers, "
                        "16-bit logits)"},
    [DS_MP_ACT_GRADS] = {"activation gradients", DS_MEM_ACTIVATIONS,
                         "4 x the gradient at every layer boundary outside checkpointed spans "
                         "but before a layer that passes it through (a Dropout of p = 0) "
                         "and along a run of layers called in place (GPT's blocks and their "
                         "Residuals: one buffer), and at each stage's input (d(logits) is written over the logits, "
                         "in their type); 2 x for 16-bit ones (GELU's and attention's into "
                         "a 16-bit Linear)"},
    [DS_MP_RECOMPUTE] = {"recompute working set", DS_MEM_ACTIVATIONS,
                         "4 x the activations and boundary gradients of the checkpointed span "
                         "being recomputed (the largest span sets the peak)"},
    [DS_MP_SCRATCH] = {"attention scratch", DS_MEM_WORKSPACE,
                       "4 x B.H.T (with attention dropout too) per attention layer outside "
                       "checkpointed spans (kept), "
                       "and the one of the span being recomputed"},
    [DS_MP_IMAGES] = {"16-bit layer workspace", DS_MEM_WORKSPACE,
                      "the largest layer's 16-bit kernel workspace: a Linear's GEMM "
                      "workspace, an Embedding's 8 x B.T + 4 x d in backward, a LayerNorm's "
                      "4 x d two or three times, and attention's fp32 copies of a 16-bit "
                      "qkv and output (cpu and sim: docs/memory.md)"},
    [DS_MP_INIT] = {"initialisation staging", DS_MEM_WORKSPACE,
                    "4 x the largest parameter, while stages are built"},
    [DS_MP_BUCKETS] = {"ZeRO-2/3 buckets", DS_MEM_COMM,
                       "2 x 4 x min(bucket, N x shard) of the largest ZeRO-2/3 stage"},
    [DS_MP_RING] = {"communication buffers", DS_MEM_COMM,
                    "Gloo's reduce-scatter ring: 4 MiB at world > 1 on CPU ranks"},
    [DS_MP_DATA] = {"data", DS_MEM_DATA,
                    "a micro-batch's inputs and targets (4 x B.T each for token ids), and "
                    "their device copies off the host"},
};

const char *ds_mp_line_name(ds_mp_line l) {
    return (unsigned)l < DS_MP_NLINES ? LINES[l].name : "?";
}

ds_mem_cat ds_mp_line_cat(ds_mp_line l) {
    return (unsigned)l < DS_MP_NLINES ? LINES[l].cat : DS_MEM_WORKSPACE;
}

const char *ds_mp_line_formula(ds_mp_line l) {
    return (unsigned)l < DS_MP_NLINES ? LINES[l].formula : "";
}
