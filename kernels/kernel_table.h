/* The kernels as one table per device (kernels/device.h): what layers, the criterion,
 * the optimizers, the loss scaler and ZeRO call, never naming a backend. Every entry has
 * the semantics of its twin in kernels.h (row-major, Linear weights [OC, C], parameter
 * gradients accumulated +=, reductions in a fixed order), with pointers into the device's
 * memory, queued on its compute stream. A backward that produces an input (activation)
 * gradient takes `int acc` right after that pointer (dinp, dqkv): 1 adds into it (+=),
 * 0 writes it (=) without reading what it held, so a gradient with one contributor
 * needs no zeroing pass before it; either way the bits of adding into zeros (but the
 * sign of a zero). Where kernels.h returns a sum, the entry writes it to a device double
 * instead (one number the caller copies to the host when it needs it: the loss, the
 * gradient norm, the fp16 overflow). */
#ifndef DS_KERNEL_TABLE_H
#define DS_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h" /* ds_rng_key, ds_half */

/* How a device's 16-bit GEMM takes its operands, which fixes the workspace the matmul16
 * entries need: fp32 ones (the CPU's sgemm, also the simulator's: an fp32 image of the
 * weight, fp32 copies of the input and output gradient rounded to 16 bits, the weight
 * gradient in fp32 before its one rounding) or 16-bit ones (cuBLASLt: the input and the
 * output gradient rounded to 16 bits, the bias widened to fp32 for the epilogue). */
typedef enum ds_gemm16_form { DS_GEMM16_F32, DS_GEMM16_HALF } ds_gemm16_form;

/* a workspace part's bytes, rounded up so every part starts 256-byte aligned (cuBLASLt's
 * preferred alignment) when the workspace does */
static inline size_t ds_ws_part(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

/* The matmul16 entries work through the output columns in chunks of this many (the last
 * one shorter), on every device and in the same order, so a Linear's workspace grows
 * with min(OC, chunk), not OC: GPT's head (OC = V = 50,257) would otherwise need its
 * whole [N, V] output gradient in 16 bits (cuda) or fp32 (cpu, sim) and, on cpu and sim,
 * the fp32 images of its whole [V, C] weight and gradient. A constant (not a byte
 * budget) so the arithmetic is the same whatever N and device: 4096 columns keep every
 * Linear of GPT-2 124M and 350M but the head in one chunk, as before chunking (the same
 * bits), and are a multiple of 8 for the tensor cores; at N = 8,192 rows a chunk's
 * 16-bit output gradient is 64 MiB. A Linear with OC > chunk sums dinp in fp32 chunk
 * after chunk (dinp += dout[:, chunk] @ W[chunk, :]; writing, acc = 0: the first chunk
 * writes, the next add, the bits of adding them all into zeros), which changes dinp's
 * summation order against one GEMM over all OC, identically on every device. */
#define DS_MATMUL16_COLS 4096

/* the columns of the largest chunk of OC output columns */
static inline size_t ds_matmul16_cols(size_t OC) {
    return OC < (size_t)DS_MATMUL16_COLS ? OC : (size_t)DS_MATMUL16_COLS;
}

/* Which activations of a matmul16 call are 16-bit, in the weight's format h (the others
 * fp32): its input (both directions), and its output (forward) or output gradient
 * (backward). A Linear inside a 16-bit stage passes its 16-bit activations as they are,
 * and the head of a model with 16-bit logits gets their 16-bit gradient. */
enum { DS_MM16_IN = 1, DS_MM16_OUT = 2 };

/* The row stride (elements) of a chunk of k output-gradient columns copied into the
 * workspace on cuda: k rounded up to 8, so every row starts 16-byte aligned (what
 * cuBLASLt's tensor-core kernels load; Hopper's TMA refuses other strides) even for the
 * last, odd chunk of GPT's 50,257 columns. */
static inline size_t ds_matmul16_ld(size_t k) { return (k + 7) & ~(size_t)7; }

/* Whether cuda's matmul16_backward copies each chunk of the output gradient into the
 * workspace: an fp32 one always (rounded to 16 bits), a 16-bit one when its rows, OC
 * elements apart, are not 16-byte aligned (OC % 8 != 0: GPT's head); otherwise it is read
 * in place. */
static inline int ds_matmul16_dout_copied(int io16, size_t OC) {
    return !(io16 & DS_MM16_OUT) || OC % 8 != 0;
}

/* The bytes of workspace matmul16_forward (backward = 0) or _backward (1) needs for N
 * rows, C inputs, OC outputs and the activations io16 says are 16-bit, whatever pointers
 * are NULL: the planner (runtime/memplan) and the caller use the same number. K: the
 * largest chunk's columns. */
static inline size_t ds_matmul16_workspace(ds_gemm16_form f, int backward, size_t N, size_t C,
                                           size_t OC, int io16) {
    size_t K = ds_matmul16_cols(OC);
    int in16 = io16 & DS_MM16_IN, out16 = io16 & DS_MM16_OUT;
    /* cuBLASLt reads 16-bit activations as they are (a 16-bit output gradient chunk
     * through its leading dimension when its rows are aligned, else copied as an fp32
     * one is rounded: ds_matmul16_dout_copied) and writes a 16-bit output itself, its
     * bias then in the output's type; the forward's one GEMM over all OC needs no N x OC
     * part */
    if (f == DS_GEMM16_HALF)
        return backward ? (ds_matmul16_dout_copied(io16, OC) ? ds_ws_part(2 * N * ds_matmul16_ld(K)) : 0) +
                              (in16 ? 0 : ds_ws_part(2 * N * C))
                        : (in16 ? 0 : ds_ws_part(2 * N * C)) + (out16 ? 0 : ds_ws_part(4 * OC));
    /* sgemm takes fp32 operands whatever the activations' type: the weight chunk's image
     * (backward: then its gradient once dinp's part is done), the input rounded or
     * widened, the bias chunk widened, and one chunk of the output gradient rounded or
     * widened (backward) or of the fp32 output before its rounding (forward, 16-bit) */
    return ds_ws_part(4 * K * C) + ds_ws_part(4 * N * C) + ds_ws_part(4 * K) +
           (backward || out16 ? ds_ws_part(4 * N * K) : 0);
}

/* The bytes of workspace embedding16_backward needs for N positions of C columns: the
 * positions sorted by id (8 bytes each) and one row's fp32 sum, whatever the vocabulary
 * (the cuda entry sorts in its context's scratch, as embedding_backward, and leaves ws
 * alone). embedding16_forward and the posemb16 pair need none. */
static inline size_t ds_embedding16_workspace(size_t N, size_t C) {
    return ds_ws_part(8 * N) + ds_ws_part(4 * C);
}

/* The bytes of workspace layernorm16_forward (backward = 0) or _backward (1) needs for
 * C columns: C floats each for the weight and the bias widened (forward: the cpu's
 * kernels run on them; cuda reads the 16-bit ones), for the widened weight, dweight
 * and dbias (backward: the parameter gradients summed in fp32 before their one
 * rounding, on every device). */
static inline size_t ds_layernorm16_workspace(int backward, size_t C) {
    return (backward ? 3 : 2) * ds_ws_part(4 * C);
}

/* How a device's fused attention takes 16-bit qkv and gives a 16-bit output, which fixes
 * the workspace the attention16 entries need: through fp32 copies (the CPU's fused
 * kernels, also the simulator's: qkv widened, the output computed in fp32, then rounded;
 * backward widens qkv again) or as they are (cuda: the flash kernels widen qkv as they
 * load it into shared memory and registers and round the output where they store it;
 * backward reads the stored output for its row term sum(dout * out)). */
typedef enum ds_attn16_form { DS_ATTN16_F32, DS_ATTN16_HALF } ds_attn16_form;

/* The bytes of workspace attention16_forward_fused (backward = 0) or _backward_fused (1)
 * need for N = B*T rows of qkv [N, 3C] -> [N, C], in16 / out16 / din16 as the entries
 * take them: the widened qkv first, then the fp32 output (forward) or the fp32 dqkv
 * before its one rounding into a 16-bit dqkv (backward: the CPU's kernels accumulate
 * dk and dv over chunks of query rows). The CPU's backward recomputes from qkv and lse
 * alone, so it widens no output. cuda rounds each dqkv element where it stores it. */
static inline size_t ds_attention16_workspace(ds_attn16_form f, int backward, size_t N,
                                              size_t C, int in16, int out16, int din16) {
    if (f == DS_ATTN16_HALF) return 0;
    return ds_ws_part(in16 ? 4 * N * 3 * C : 0) +
           ds_ws_part(backward ? (din16 ? 4 * N * 3 * C : 0) : (out16 ? 4 * N * C : 0));
}

typedef struct ds_kernel_table {
    /* dense */
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
    void (*matmul_backward)(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);
    /* dense with a 16-bit weight and bias (h; bias may be NULL), fp32 accumulation, the
     * activations fp32 or 16-bit in h as io16 (DS_MM16_*) says: out = round16(inp) @ W^T
     * + b (a 16-bit out: that fp32 result rounded once per element); backward: dinp (+)=
     * round16(dout) @ W, and dweight, dbias get round16(them + the fp32 result of
     * round16(dout)^T @ round16(inp) and of round16(dout)'s column sums): one rounding per
     * element and call, as the 16-bit gradients of an fp32 image would. round16 of a
     * 16-bit activation is the activation: a 16-bit input or output gradient gives the
     * bits of its widened fp32 copy, a 16-bit output the bits of the fp32 output rounded.
     * dinp is fp32. Any of dinp, dweight, dbias may be NULL (inp is read only for
     * dweight, weight only for dinp). Both work in chunks of DS_MATMUL16_COLS output
     * columns, dinp's fp32 sum accumulated chunk after chunk, no [N, OC] fp32 copy of out
     * or dout on any device. ws: the device's ds_matmul16_workspace bytes, clobbered. */
    void (*matmul16_forward)(ds_half h, void *out, const void *inp, int io16,
                             const uint16_t *weight, const uint16_t *bias, int N, int C, int OC,
                             void *ws);
    void (*matmul16_backward)(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                              const void *dout, const void *inp, int io16, const uint16_t *weight,
                              int N, int C, int OC, void *ws);
    /* elementwise */
    void (*add_forward)(float *out, const float *a, const float *b, size_t n);
    void (*accumulate)(float *dst, const float *src, size_t n);
    void (*scale)(float *x, float s, size_t n);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, int acc, const float *inp, const float *dout, size_t n);
    /* GELU with 16-bit activations of format h: inp is in h when in16 (else fp32), out in
     * h when out16 (else fp32); each element is gelu_forward's value on the widened input,
     * rounded once into a 16-bit out. backward: the input in h, dinp as gelu_backward's
     * on the widened input, in h when din16 (that fp32 value rounded once per element:
     * what a Linear's matmul16_backward would round it to; written, acc not read), else
     * fp32. Elementwise, no workspace. */
    void (*gelu16_forward)(ds_half h, void *out, const void *inp, size_t n, int in16,
                           int out16);
    void (*gelu16_backward)(ds_half h, void *dinp, int acc, const uint16_t *inp, const float *dout,
                            size_t n, int din16);
    /* normalisation */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps);
    void (*layernorm_backward)(float *dinp, int acc, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);
    /* embedding */
    void (*embedding_forward)(float *out, const int32_t *ids, const float *table, int N, int C);
    void (*embedding_backward)(float *dtable, const float *dout, const int32_t *ids, int N, int C);
    /* embeddings and LayerNorm with 16-bit parameters (h), fp32 activations: the
     * parameters widened where they are read (exact, so forward has the bits of the fp32
     * entries on fp32 copies); each parameter gradient summed in fp32 from zero, then
     * added into the 16-bit gradient with one rounding per element and call, as the
     * 16-bit gradients of fp32 images were. embedding16_backward: for each id in ids,
     * the rows of dout with that id summed in order n = 0..N-1, then added to dtable's
     * row (rows of ids not in ids untouched). posemb16: out[b,t,:] = inp[b,t,:] +
     * table[t,:]; backward: dtable[t,:] gets the sum over b = 0..B-1 of dout[b,t,:] (no
     * dinp: the caller adds dout). layernorm16: as layernorm_*, statistics in fp32;
     * weight and bias not NULL; dinp, dweight, dbias may be NULL; forward writes out in h
     * when out16 (layernorm_forward's fp32 value rounded once), else in fp32. ws: the
     * ds_embedding16_workspace / ds_layernorm16_workspace bytes, clobbered. */
    void (*embedding16_forward)(ds_half h, float *out, const int32_t *ids,
                                const uint16_t *table, int N, int C);
    void (*embedding16_backward)(ds_half h, uint16_t *dtable, const float *dout,
                                 const int32_t *ids, int N, int C, void *ws);
    void (*posemb16_forward)(ds_half h, float *out, const float *inp, const uint16_t *table,
                             int B, int T, int C);
    void (*posemb16_backward)(ds_half h, uint16_t *dtable, const float *dout, int B, int T,
                              int C);
    void (*layernorm16_forward)(ds_half h, void *out, float *mean, float *rstd,
                                const float *inp, const uint16_t *weight, const uint16_t *bias,
                                int N, int C, float eps, int out16, void *ws);
    void (*layernorm16_backward)(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                 uint16_t *dbias, const float *dout, const float *inp,
                                 const uint16_t *weight, const float *mean, const float *rstd,
                                 int N, int C, void *ws);
    /* attention */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
    void (*attention_backward)(float *dqkv, int acc, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH);
    void (*attention_forward_dropout)(float *out, float *att, const float *qkv, int B, int T,
                                      int C, int NH, float p, ds_rng_key key);
    void (*attention_backward_dropout)(float *dqkv, int acc, float *scratch, const float *dout,
                                       const float *qkv, const float *att, int B, int T, int C,
                                       int NH, float p, ds_rng_key key);
    /* fused (kernels.h's _fused pair): lse [B,NH,T] instead of att, dropout p on the
     * probabilities under key as the _dropout pair's (p = 0: none, the plain pair's
     * results); backward reads the forward's out and lse, redraws the mask, and may use
     * scratch, B*NH*T floats (clobbered). The cuda table supports head sizes up to 128
     * (larger: the device's error). */
    void (*attention_forward_fused)(float *out, float *lse, const float *qkv, int B, int T,
                                    int C, int NH, float p, ds_rng_key key);
    void (*attention_backward_fused)(float *dqkv, int acc, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, float p, ds_rng_key key);
    /* the fused pair with 16-bit activations of format h: qkv in h when in16 (else fp32),
     * out in h when out16 (else fp32), as the forward wrote it; lse and dout fp32, dqkv
     * in h when din16 (written, acc not read: the fp32 dqkv rounded once per element, what
     * c_attn's matmul16_backward would round it to), else fp32; softmax and its
     * statistics in fp32. Each value is the fp32 pair's on the widened operands, the
     * output rounded once. ws: ds_attention16_workspace's bytes for the device's form,
     * clobbered. */
    void (*attention16_forward_fused)(ds_half h, void *out, float *lse, const void *qkv, int B,
                                      int T, int C, int NH, float p, ds_rng_key key, int in16,
                                      int out16, void *ws);
    void (*attention16_backward_fused)(ds_half h, void *dqkv, int acc, float *scratch,
                                       const float *dout, const void *qkv, const void *out,
                                       const float *lse, int B, int T, int C, int NH, float p,
                                       ds_rng_key key, int in16, int out16, int din16, void *ws);
    /* loss: *sum (a device double) = the sum of the losses, in row order; the backwards
     * write (=) the gradient, dlogits may be logits (kernels.h) */
    void (*crossentropy_forward)(float *losses, const float *logits, const int32_t *targets,
                                 int N, int V, double *sum);
    void (*crossentropy_backward)(float *dlogits, const float *logits, const int32_t *targets,
                                  float dloss, int N, int V);
    void (*crossentropy_forward_backward)(float *losses, float *dlogits, const float *logits,
                                          const int32_t *targets, float dloss, int N, int V,
                                          double *sum);
    /* over 16-bit logits (h): each row's statistics, its loss and the sum in fp32 from the
     * widened logits (the bits crossentropy_* give on a widened fp32 copy); dlogits, when
     * not NULL, written (=) in h: that fp32 gradient rounded once per element (dlogits
     * may be logits). losses and sum NULL: the gradient alone (backward). */
    void (*crossentropy16)(ds_half h, float *losses, uint16_t *dlogits, const uint16_t *logits,
                           const int32_t *targets, float dloss, int N, int V, double *sum);
    /* dropout */
    void (*dropout_forward)(float *out, const float *inp, size_t n, float p, ds_rng_key key);
    void (*dropout_backward)(float *dinp, int acc, const float *dout, size_t n, float p,
                             ds_rng_key key);
    /* out = x + dropout_forward(f): the same bits as dropout_forward into a buffer then
     * add_forward(out, x, it), in one pass and without that buffer */
    void (*dropout_add_forward)(float *out, const float *x, const float *f, size_t n, float p,
                                ds_rng_key key);
    /* optimizer; sums of squares to a device double */
    void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t);
    /* AdamW on grad * grad_scale over spans of the buffers, each with its weight decay
     * (kernels.h's ds_adamw_spans): one launch for a whole stage or shard. spans is host
     * memory, read before the entry returns. */
    void (*adamw_spans)(float *param, const float *grad, float grad_scale, float *m, float *v,
                        const ds_decay_span *spans, int nspans, float lr, float beta1,
                        float beta2, float eps, int t);
    void (*sgd_update)(float *param, const float *grad, float *buf, size_t n, float lr,
                       float momentum, float weight_decay);
    void (*sumsq)(const float *x, size_t n, double *out);
    /* 16-bit working copies (bf16 / fp16 as raw bits) */
    void (*half_from_f32)(ds_half h, uint16_t *dst, const float *src, size_t n);
    void (*half_to_f32)(ds_half h, float *dst, const uint16_t *src, size_t n);
    void (*half_acc_f32)(ds_half h, uint16_t *acc, const float *x, size_t n);
    void (*half_add)(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
    void (*half_scale)(ds_half h, uint16_t *x, float k, size_t n);
    void (*half_sumsq)(ds_half h, const uint16_t *x, size_t n, double *out);
    void (*adamw_half_spans)(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                             float *master, float *m, float *v, const ds_decay_span *spans,
                             int nspans, float lr, float beta1, float beta2, float eps, int t);
    void (*sgd_update_half)(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                            float *master, float *buf, size_t n, float lr, float momentum,
                            float weight_decay);
} ds_kernel_table;

/* The CPU kernels as a table (kernels/cpu): the entries are kernels.h's functions, or
 * one-line adapters where kernels.h returns a sum. The simulator runs these. */
extern const ds_kernel_table ds_cpu_kernels;

#endif
