/* The bytes of layer workspace (ds_layer_workspace) a layer takes beyond its kernels' own
 * part, and where its parts start: for a layer whose kernels take fp32 activations only
 * (attention with dropout), an fp32 copy of a 16-bit input (widened, exact) and the fp32
 * output of a layer whose output is 16-bit (rounded into it afterwards), each part
 * 256-byte aligned (ds_ws_part). A Linear, LayerNorm or GELU takes its kernels' part
 * alone (kernel_table.h's ds_matmul16_workspace, ds_layernorm16_workspace; gelu16 none).
 * The layers and the memory planner (runtime/memplan) take the same numbers. */
#ifndef DS_LAYER_WORKSPACE_H
#define DS_LAYER_WORKSPACE_H

#include <stddef.h>

#include "ds_err.h"
#include "kernel_table.h"

typedef struct ds_ws_io {
    size_t in, out; /* byte offsets of the widened input and of the fp32 output */
    size_t total;   /* the bytes to ask for */
} ds_ws_io;

/* in_bytes / out_bytes: 0 where no copy is needed */
static inline ds_ws_io ds_ws_io_after(size_t kernel, size_t in_bytes, size_t out_bytes) {
    ds_ws_io w;
    w.in = ds_ws_part(kernel);
    w.out = w.in + ds_ws_part(in_bytes);
    w.total = w.out + ds_ws_part(out_bytes);
    return w;
}

/* The part of workspace ws at byte offset off; NULL when no workspace was taken (no part
 * is needed then). */
static inline void *ds_ws_at(void *ws, size_t off) { return ws ? (char *)ws + off : NULL; }

/* The layer workspace (ds_layer_workspace) of bytes in *ws, or NULL when bytes is 0 (a
 * layer whose kernels need none on this device); -1 with err when it cannot be had. */
int ds_layer_workspace_opt(size_t bytes, void **ws, ds_err *err);

/* Attention over N = B*T rows of qkv [N, 3C] -> [N, C]. Without dropout (the fused
 * kernels): the attention16 entries' part for the device's form f, which holds any fp32
 * copies itself (din16: a 16-bit dqkv, backward). With dropout (the [B,NH,T,T] kernels,
 * fp32 only, dqkv fp32): a 16-bit qkv widened (both directions) and the output computed
 * in fp32 (forward). GELU needs none: its gelu16 entries widen and round per element. */
static inline ds_ws_io ds_attention_ws(ds_attn16_form f, int dropout, int backward, size_t N,
                                       size_t C, int in16, int out16, int din16) {
    if (!dropout)
        return ds_ws_io_after(ds_attention16_workspace(f, backward, N, C, in16, out16, din16), 0,
                              0);
    return ds_ws_io_after(0, in16 ? 4 * N * 3 * C : 0, !backward && out16 ? 4 * N * C : 0);
}

#endif
