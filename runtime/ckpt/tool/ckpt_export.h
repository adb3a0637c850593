/* Export: a checkpoint's model weights as one safetensors file, named and laid out as the
 * model's ecosystem expects. What to write is the engine's decision, recorded at save
 * time in its JSON object (meta.json "engine") under "export":
 *
 *   "export": {
 *     "metadata": {"format": "pt"},                     optional, string values
 *     "tensors": [
 *       {"name": "transformer.wte.weight", "array": "embed/params",
 *        "offset": 0, "shape": [50257, 768]},
 *       {"name": "transformer.h.0.attn.c_attn.weight", "array": "blocks/params",
 *        "offset": 1536, "shape": [2304, 768], "transpose": true}, ...]}
 *
 * Each tensor is elements [offset, offset + prod(shape)) of the logical array, of shape
 * `shape` (row-major); "transpose" (2-D only) writes it as shape reversed, transposed
 * (Hugging Face GPT-2 keeps its Conv1D weights as [in, out]). The dtype is the array's,
 * or "dtype" ("bf16" or "fp16" from an fp32 array, rounded to nearest even as the engine
 * rounds a 16-bit stage's fp32 masters into its working copy). So the exporter knows no
 * model: the engine writes the table (ds.export) and gpt.lua's naming rules travel in it. */
#ifndef DS_CKPT_EXPORT_H
#define DS_CKPT_EXPORT_H

#include "ckpt.h"

int ds_ckpt_export_safetensors(ds_ckpt *ck, const char *out_path, ds_err *err);

#endif
