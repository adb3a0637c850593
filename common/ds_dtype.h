/* Element types, shared by every part that stores or moves numbers: the engine's
 * tensors, the checkpoint format, the communicators, safetensors export. bf16 and fp16
 * are raw 16-bit patterns (uint16_t): gcc has no __bf16 on x86. */
#ifndef DS_DTYPE_H
#define DS_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum ds_dtype { DS_F32, DS_BF16, DS_F16, DS_I32 } ds_dtype;

size_t ds_dtype_size(ds_dtype t);
/* "fp32", "bf16", "fp16", "int32" */
const char *ds_dtype_name(ds_dtype t);
/* out[cols, rows] = the transpose of in[rows, cols], elements of esize bytes (GPT-2's
 * Conv1D layout <-> ours, in Lua and in the checkpoint export). */
void ds_transpose2d(void *out, const void *in, int64_t rows, int64_t cols, size_t esize);

#endif
