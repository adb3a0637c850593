/* The layer workspace (ds_layer_workspace) a layer takes: its kernels' own part alone
 * (kernel_table.h's ds_matmul16_workspace, ds_layernorm16_workspace,
 * ds_attention16_workspace; gelu16 needs none), no copies of the layer's own. The layers
 * and the memory planner (runtime/memplan) take the same numbers. */
#ifndef DS_LAYER_WORKSPACE_H
#define DS_LAYER_WORKSPACE_H

#include <stddef.h>

#include "ds_err.h"
#include "kernel_table.h"

/* The layer workspace (ds_layer_workspace) of bytes in *ws, or NULL when bytes is 0 (a
 * layer whose kernels need none on this device); -1 with err when it cannot be had. */
int ds_layer_workspace_opt(size_t bytes, void **ws, ds_err *err);

#endif
