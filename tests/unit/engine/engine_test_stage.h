/* What the engine tests that build stages from C layers share: naming a layer, a fixed
 * pseudo-random input, GPT's block, a tensor's bytes, and the device the test runs on
 * (DS_ENGINE_DEVICE). */
#ifndef ENGINE_TEST_STAGE_H
#define ENGINE_TEST_STAGE_H

#include <stdint.h>

#include "kernel_count.h"
#include "stage.h"

/* l with its name set (asserts l exists: a constructor's NULL fails the test) */
ds_layer *eng_named(ds_layer *l, const char *name);
/* An fp32 host tensor [B, T, C] of values in [-1, 1), the same every call. */
ds_tensor *eng_input(int64_t B, int64_t T, int64_t C);
/* nn.TransformerBlock's tree for width C and NH heads: x + attn(ln_1(x)), then
 * x + mlp(ln_2(x)), each branch Residual(Sequential(ln, Sequential(c_attn | c_fc,
 * Attention | GELU, c_proj) named attn | mlp, Dropout(p))); four Linears, attention
 * dropout p. p < 0: the same tree without its Dropouts, attention dropout 0. */
ds_layer *eng_gpt_block(const char *name, int C, int NH, float p);
/* A stage "name" of the n layers l (taken), ZeRO 0, seed 5 (fails the test on error) */
ds_stage *eng_stage(const char *name, ds_layer **l, int n, ds_dtype prec, int checkpoint);
/* A stage "blocks" of n GPT blocks "h.0", "h.1", ... (eng_gpt_block) */
ds_stage *eng_blocks_stage(int n, int C, int NH, ds_dtype prec, int checkpoint, float p);
/* Writes a fixed pattern of gradients in [-0.3, 0.33] over t (fp32, on any device) */
void eng_grad_pattern(ds_tensor *t);
/* t's bytes on the host, wherever t lives; free() them */
unsigned char *eng_bytes(const ds_tensor *t);
/* A step's results as bytes on the host (eng_bytes): its output, d(input) and parameter
 * gradients */
typedef struct eng_step_bytes {
    unsigned char *out, *din, *grads;
    size_t out_n, din_n, grads_n;
} eng_step_bytes;
/* Fails the test, naming what (a case) and which part differs, unless a and b are the same
 * bytes; other: what b is ("the copy path") */
void eng_same_step(const eng_step_bytes *a, const eng_step_bytes *b, const char *what,
                   const char *other);
void eng_step_bytes_free(eng_step_bytes *b);
/* The counting table's slot named name (kernel_count.h: a kernel_table.h entry; the
 * memory ops have their DS_KCOUNT_ slots); fails the test when there is none */
ds_kcount eng_kcount(const char *name);
/* Opens the device DS_ENGINE_DEVICE names (cpu when unset or auto); 0, or 1 after
 * printing why not: main's exit status. */
int eng_open_device(void);

#endif
