/* The kernel interface: one set of plain functions on fp32 arrays (the CPU backend, cpu/;
 * kernels_cuda.h has the CUDA backend's twins with the same shapes and semantics).
 * Conventions, shared by every kernel:
 *   - row-major; N = number of rows (B*T tokens), C = channels.
 *   - Linear weights are [OC, C] (PyTorch's nn.Linear layout); out = inp @ W^T + b.
 *   - Every *_backward ACCUMULATES (+=) into the parameter gradients (dweight, dbias,
 *     dtable), so micro-batches accumulate without extra adds; the caller zeroes them
 *     when a new accumulation starts. The input gradient (dinp, dqkv) is followed by
 *     `int acc`: 1 accumulates into it as well (a residual's sum), 0 WRITES it (=, its
 *     old contents never read, NaN included), so a gradient with one contributor needs
 *     no zeroing pass. Writing gives the bits of accumulating into zeros (up to the sign
 *     of a zero: x + 0 is +0 where x is -0).
 *   - Reductions run in a fixed order for a given (shape, thread count): the same call
 *     twice gives the same bits.
 *   - Pointers may be NULL where noted (no bias, no dbias, ...).
 * Every kernel has a plain reference implementation in the tests it is checked against.
 */
#ifndef DS_KERNELS_H
#define DS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* ---- dense ---------------------------------------------------------------------- */
/* out[N,OC] = inp[N,C] @ weight[OC,C]^T + bias[OC] (bias may be NULL). */
void ds_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                       int N, int C, int OC);
/* dinp[N,C] (+)= dout @ W; dweight[OC,C] += dout^T @ inp; dbias[OC] += sum_rows(dout).
 * Any of dinp, dweight, dbias may be NULL (not wanted). */
void ds_matmul_backward(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int N, int C, int OC);

/* ---- elementwise ---------------------------------------------------------------- */
void ds_add_forward(float *out, const float *a, const float *b, size_t n);   /* out = a+b */
void ds_accumulate(float *dst, const float *src, size_t n);                    /* dst += src */
void ds_scale(float *x, float s, size_t n);                                    /* x *= s */
/* GELU, tanh approximation (GPT-2's). */
void ds_gelu_forward(float *out, const float *inp, size_t n);
void ds_gelu_backward(float *dinp, int acc, const float *inp, const float *dout, size_t n);

/* ---- normalisation -------------------------------------------------------------- */
/* mean[N], rstd[N] are saved for backward. */
void ds_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *weight, const float *bias, int N, int C, float eps);
void ds_layernorm_backward(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *mean,
                           const float *rstd, int N, int C);

/* ---- embedding ------------------------------------------------------------------ */
/* out[N,C] = table[ids[n]] ; backward: dtable[ids[n]] += dout[n] (rows in order n=0..N-1). */
void ds_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C);
void ds_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C);

/* ---- dropout key (counter-based RNG) ---------------------------------------------- */
/* Philox-4x32-10 keyed by (seed, step, layer, micro): element i keeps with prob 1-p and is
 * scaled by 1/(1-p). Same key => same mask, so a recomputation draws the same mask and
 * backward needs no saved mask. offset: element i draws as element offset + i would, so
 * a data-parallel rank holding rows [r*B, (r+1)*B) of the global batch passes
 * r * B * (elements per row) and draws the masks of the single-rank run. */
typedef struct ds_rng_key {
    uint64_t seed;
    uint32_t step, layer, micro;
    uint64_t offset;
} ds_rng_key;

/* ---- attention ------------------------------------------------------------------ */
/* Causal multi-head self-attention on packed qkv[B,T,3C] (q | k | v, heads of size C/NH
 * inside each). out[B,T,C]. att[B,NH,T,T] holds the softmax probabilities (saved for
 * backward; entries above the diagonal are 0). */
void ds_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (+)= ...; scratch must hold B*NH*T*T floats (clobbered). */
void ds_attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int NH);
/* The same with dropout on the probabilities (GPT-2's attn_pdrop): out = (P*M) V, where M
 * is ds_dropout_forward's mask for the [B,NH,T,T] tensor of probabilities under the same
 * key (element ((b*NH + h)*T + t)*T + u, plus key.offset). att keeps P UNdropped; backward
 * redraws M from the key, so nothing but att is saved. p = 0: bit-identical to the plain
 * kernels. 0 <= p < 1. */
void ds_attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH, float p, ds_rng_key key);
void ds_attention_backward_dropout(float *dqkv, int acc, float *scratch, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C, int NH,
                                   float p, ds_rng_key key);

/* Fused (no [B,NH,T,T] tensor; kernels/cuda/attention_flash.cu on a GPU), with dropout
 * p on the probabilities under key as the _dropout pair's (the same mask; p = 0: none).
 * Forward: the same out as ds_attention_forward_dropout (the same bits; p = 0:
 * ds_attention_forward's), and lse[B,NH,T], each row's natural log of its sum of
 * exp(score) over the undropped probabilities, what backward recomputes them from.
 * Backward: dqkv (+)= the gradients of ds_attention_backward_dropout, within rounding
 * (P = exp(score - lse) is not the reference's bits); it redraws the mask. A thread's
 * workspace grows with T; nothing with T^2. 0 <= p < 1. */
void ds_attention_forward_fused(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH, float p, ds_rng_key key);
void ds_attention_backward_fused(float *dqkv, int acc, const float *dout, const float *qkv,
                                 const float *lse, int B, int T, int C, int NH, float p,
                                 ds_rng_key key);

/* ---- loss ----------------------------------------------------------------------- */
/* Per row n: losses[n] = logsumexp(logits[n,:V]) - logits[n,targets[n]]; the softmax
 * probabilities overwrite nothing: backward recomputes from logits. Rows with
 * target < 0 are ignored (loss 0); any other target must be < V (the caller checks its
 * data once, not the kernel per row). Returns the sum of the losses (fixed order). */
double ds_crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                               int N, int V);
/* WRITES (=, not +=) dlogits[n,:] = dloss * (softmax(logits[n]) - onehot(targets[n])), a
 * zero row where target < 0. dlogits may be the logits buffer itself: the head's backward
 * then needs no second [N,V] buffer and no zeroing. dloss is the gradient of the total
 * objective w.r.t. each row's loss (e.g. 1/N for a mean). */
void ds_crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                              float dloss, int N, int V);
/* Both in one pass over each row (the fast path for a large vocabulary): the losses, their
 * sum and the gradient have the same bits as forward then backward; dlogits may be the
 * logits buffer itself. */
double ds_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                        const int32_t *targets, float dloss, int N, int V);

/* ---- dropout (keyed by ds_rng_key above) ----------------------------------------- */
void ds_philox4x32(uint32_t out[4], const uint32_t counter[4], const uint32_t key[2]);
void ds_dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key);
void ds_dropout_backward(float *dinp, int acc, const float *dout, size_t n, float p,
                         ds_rng_key key);
/* out = x + dropout(f) in one pass: the bits of ds_dropout_forward(y, f) then
 * ds_add_forward(out, x, y), without y (a Residual whose branch ends in a Dropout) */
void ds_dropout_add_forward(float *out, const float *x, const float *f, size_t n, float p,
                            ds_rng_key key);

/* ---- optimizer ------------------------------------------------------------------ */
/* One AdamW step on n elements (a slice of a flat buffer). t is the 1-based step for
 * bias correction; weight_decay is decoupled (param -= lr*wd*param), 0 for no decay. */
void ds_adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, int t);
/* The same step on grad * grad_scale, without touching grad: gradient clipping (scale =
 * max_norm / norm) or fp16 loss-scale removal fused into the one pass over the buffers. */
void ds_adamw_update_scaled(float *param, const float *grad, float grad_scale, float *m,
                            float *v, size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t);
/* SGD with momentum (PyTorch's form: buf = mom*buf + g; p -= lr*buf), weight decay L2. */
void ds_sgd_update(float *param, const float *grad, float *buf, size_t n, float lr,
                   float momentum, float weight_decay);
/* Sum of squares in double, fixed order (grad-norm building block). */
double ds_sumsq(const float *x, size_t n);

/* ---- precision conversion (bf16 as uint16_t: gcc has no __bf16 on x86) ---------- */
void ds_f32_to_bf16(uint16_t *dst, const float *src, size_t n);   /* round to nearest even */
void ds_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void ds_f32_to_f16(uint16_t *dst, const float *src, size_t n);    /* IEEE half, RNE */
void ds_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* ---- 16-bit working copies (mixed precision) -------------------------------------- */
/* Arithmetic on bf16 / fp16 arrays (raw bits) done in fp32 with one rounding to 16 bits
 * per result, the way 16-bit hardware with fp32 accumulation does it. */
typedef enum ds_half { DS_HALF_BF16, DS_HALF_F16 } ds_half;
void ds_half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n);
void ds_half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n);
/* acc[i] = round16(acc[i] + x[i]): an fp32 gradient added into a 16-bit gradient buffer. */
void ds_half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n);
/* dst[i] = src[i] rounded to 16 bits and back (dst may be src): a 16-bit GEMM's operand
 * as fp32. */
void ds_half_round_f32(ds_half h, float *dst, const float *src, size_t n);
/* out[i] = round16(a[i] + b[i]) (out may alias a or b): one step of a 16-bit reduction. */
void ds_half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n);
/* x[i] = round16(x[i] * k) */
void ds_half_scale(ds_half h, uint16_t *x, float k, size_t n);
/* Sum of squares in double, fixed order; inf or NaN anywhere makes it non-finite. */
double ds_half_sumsq(ds_half h, const uint16_t *x, size_t n);
/* AdamW / SGD on a 16-bit working copy w: the step runs on the fp32 master weights with
 * grad * grad_scale widened to fp32 (grad untouched), then w = round16(master). */
void ds_adamw_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                          float *master, float *m, float *v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t);
void ds_sgd_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                        float *master, float *buf, size_t n, float lr, float momentum,
                        float weight_decay);
/* A run of a flat buffer that one AdamW call steps with its own weight decay: elements
 * [off, off + n) of the call's pointers (PyTorch's parameter groups: weights decay,
 * biases and LayerNorms do not). One call over a stage's (or ZeRO shard's) runs is one
 * GPU launch instead of one per parameter tensor. */
typedef struct ds_decay_span {
    size_t off, n;
    float weight_decay;
} ds_decay_span;
/* ds_adamw_update_scaled / ds_adamw_update_half on each span in turn (spans must not
 * overlap; elements between them are untouched): the same bits as one call per span. */
void ds_adamw_spans(float *param, const float *grad, float grad_scale, float *m, float *v,
                    const ds_decay_span *spans, int nspans, float lr, float beta1, float beta2,
                    float eps, int t);
void ds_adamw_half_spans(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                         float *master, float *m, float *v, const ds_decay_span *spans,
                         int nspans, float lr, float beta1, float beta2, float eps, int t);

/* Dense with a 16-bit weight and bias (kernel_table.h's matmul16 pair, semantics there;
 * io16: its DS_MM16_* flags): the fp32 inputs rounded to 16 bits, 16-bit ones widened,
 * then the fp32 GEMMs above, a 16-bit output rounded from each chunk's fp32 result. ws:
 * the bytes ds_matmul16_workspace(DS_GEMM16_F32, ...) gives (kernel_table.h). */
void ds_matmul16_forward(ds_half h, void *out, const void *inp, int io16, const uint16_t *weight,
                         const uint16_t *bias, int N, int C, int OC, void *ws);
void ds_matmul16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                          const void *dout, const void *inp, int io16, const uint16_t *weight,
                          int N, int C, int OC, void *ws);

/* Over 16-bit logits (kernel_table.h's crossentropy16, semantics there): losses and the
 * returned sum (0 when losses is NULL) have the bits forward gives on the widened logits,
 * dlogits (NULL: none; may be logits) the rounding of backward's fp32 gradient. */
double ds_crossentropy16(ds_half h, float *losses, uint16_t *dlogits, const uint16_t *logits,
                         const int32_t *targets, float dloss, int N, int V);

/* Embeddings and LayerNorm with 16-bit parameters (kernel_table.h's *16 entries,
 * semantics and workspaces there). */
void ds_embedding16_forward(ds_half h, float *out, const int32_t *ids, const uint16_t *table,
                            int N, int C);
void ds_embedding16_backward(ds_half h, uint16_t *dtable, const float *dout, const int32_t *ids,
                             int N, int C, void *ws);
void ds_posemb16_forward(ds_half h, float *out, const float *inp, const uint16_t *table, int B,
                         int T, int C);
void ds_posemb16_backward(ds_half h, uint16_t *dtable, const float *dout, int B, int T, int C);
void ds_layernorm16_forward(ds_half h, void *out, float *mean, float *rstd, const float *inp,
                            const uint16_t *weight, const uint16_t *bias, int N, int C,
                            float eps, int out16, void *ws);
void ds_layernorm16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                             const float *dout, const float *inp, const uint16_t *weight,
                             const float *mean, const float *rstd, int N, int C, void *ws);

/* GELU and the fused attention with 16-bit activations (kernel_table.h's gelu16 and
 * attention16 entries, semantics there): GELU widens and rounds per element (no
 * workspace), attention runs the fused pair on fp32 copies in ws, the bytes
 * ds_attention16_workspace(DS_ATTN16_F32, ...) gives. */
void ds_gelu16_forward(ds_half h, void *out, const void *inp, size_t n, int in16, int out16);
void ds_gelu16_backward(ds_half h, void *dinp, int acc, const uint16_t *inp, const float *dout,
                        size_t n, int din16);
void ds_attention16_forward_fused(ds_half h, void *out, float *lse, const void *qkv, int B,
                                  int T, int C, int NH, float p, ds_rng_key key, int in16,
                                  int out16, void *ws);
void ds_attention16_backward_fused(ds_half h, void *dqkv, int acc, const float *dout,
                                   const void *qkv, const float *lse, int B, int T, int C, int NH,
                                   float p, ds_rng_key key, int in16, int din16, void *ws);

/* Threads the CPU kernels use (OpenMP and OpenBLAS alike); 0 = library default. */
void ds_kernels_set_threads(int n);
int ds_kernels_threads(void);

/* The process environment the kernels want (cpu_env.c): OMP_WAIT_POLICY=PASSIVE unless
 * the user set a policy, and OPENBLAS_CORETYPE set to the best core the CPU supports when
 * OpenBLAS picked a lower one and the user set none. Call first thing in main: when it
 * changes either, the program starts itself again (execv of /proc/self/exe, once) and
 * this call does not return. A core it chose is checked at start with a small GEMM
 * against a reference; if that fails it warns on stderr and starts the program once more
 * without it. */
void ds_cpu_env_prepare(char **argv, const char *prog);

/* Why OpenBLAS runs the core it runs. */
typedef enum ds_blas_reason {
    DS_BLAS_OPENBLAS, /* OpenBLAS's own choice for this CPU */
    DS_BLAS_USER,     /* forced by the user's OPENBLAS_CORETYPE */
    DS_BLAS_IGNORED,  /* OpenBLAS's own choice: it did not take the user's OPENBLAS_CORETYPE */
    DS_BLAS_DSRUN,    /* chosen by dsrun: OpenBLAS picked a core below the CPU's best */
    DS_BLAS_FALLBACK, /* OpenBLAS's own choice after dsrun's failed the check at start */
} ds_blas_reason;

typedef struct ds_blas_info {
    const char *core;     /* the kernels OpenBLAS runs, e.g. Haswell, SkylakeX */
    const char *config;   /* openblas_get_config() */
    const char *coretype; /* OPENBLAS_CORETYPE when set (the user's or dsrun's), else NULL */
    int forced;           /* OpenBLAS took OPENBLAS_CORETYPE: the core is the one it names */
    ds_blas_reason reason;
    const char *reason_name; /* "openblas", "user", "ignored", "dsrun" or "fallback" */
    const char *cpu_core;    /* the best core the CPU's flags support; NULL: none known */
    char openblas_core[32];  /* dsrun, fallback: the core OpenBLAS picked itself */
    char tried[32];          /* fallback: dsrun's core that failed the check */
    char why[192];           /* the reason in words, e.g. "forced by the user's ..." */
} ds_blas_info;
ds_blas_info ds_blas_describe(void);

#endif
