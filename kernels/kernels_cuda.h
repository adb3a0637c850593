/* CUDA side of the kernels, callable from C. Compiled only when nvcc is found
 * (DS_HAVE_CUDA); callers guard with #ifdef DS_HAVE_CUDA.
 *
 * The ds_cuda_* kernels have the semantics of their ds_* twins in kernels.h (row-major,
 * Linear weights [OC, C], every *_backward ACCUMULATES += into parameter gradients and
 * into its input gradient when acc (writes it when not), fixed reduction order: the same
 * call on the same GPU gives the same bits), on device pointers. They run on the context's
 * stream (the default stream unless set) and return 0 once enqueued, or -1 with the
 * context's error filled (bad argument, launch failure, cuBLAS status). Kernel faults
 * surface at the next synchronising call (ds_cuda_sync, a copy to the host, a function
 * returning a host value). No float atomics anywhere: the order of every sum is fixed by
 * the shapes alone. */
#ifndef DS_KERNELS_CUDA_H
#define DS_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "kernels.h" /* ds_rng_key, ds_half */

/* Versions the binary was built against and runs with (runtime API, cuBLAS, NCCL). */
void ds_cuda_versions(int *cudart, int *cublas, int *nccl);

typedef struct ds_cuda_ctx ds_cuda_ctx;

/* ---- the cuda device (kernels/device.h) ------------------------------------------------
 * ds_device_open("cuda", i) gives a device whose kernels (ds_cuda_kernels, the table of
 * kernel_table.h) run on its compute stream, a non-blocking stream with the cuBLAS
 * handle on it. Its memory comes from a stream-ordered pool that keeps what it got
 * (no cudaMalloc after the first step). On it a ds_stream * is a cudaStream_t and a
 * ds_event * a cudaEvent_t; these give them as void * (NULL for another kind of device;
 * a NULL stream is the compute stream). */
extern const ds_kernel_table ds_cuda_kernels;
void *ds_cuda_device_stream(ds_device *d, ds_stream *s);
void *ds_cuda_device_event(ds_device *d, ds_event *e);
/* The context behind the device (its stream is the compute stream): for the ds_cuda_*
 * kernels below that have no table entry. */
ds_cuda_ctx *ds_cuda_device_ctx(ds_device *d);
/* Makes msg the device's sticky error (a communicator's failure on its streams). */
void ds_cuda_device_fail(ds_device *d, const char *msg);

/* ---- context: device, stream, cuBLAS handle, workspace, last error ------------------- */
/* Selects the device and creates a cuBLAS handle (CUBLAS_DEFAULT_MATH: sgemm stays full
 * FP32, no TF32 unless asked).
 * NULL with *why filled when there is no such device. */
ds_cuda_ctx *ds_cuda_ctx_create(int device, char *why, size_t why_len);
void ds_cuda_ctx_free(ds_cuda_ctx *ctx);
const char *ds_cuda_ctx_error(const ds_cuda_ctx *ctx);
/* stream is a cudaStream_t (NULL = the default stream); the cuBLAS handle follows it */
int ds_cuda_ctx_set_stream(ds_cuda_ctx *ctx, void *stream);
void *ds_cuda_ctx_stream(const ds_cuda_ctx *ctx);
/* TF32 tensor-core GEMMs for fp32 matmuls (faster, ~1e-3 relative error); off by default */
int ds_cuda_ctx_set_tf32(ds_cuda_ctx *ctx, int on);
/* the cublasHandle_t, for callers that issue their own GEMMs (benchmarks) */
void *ds_cuda_ctx_cublas(ds_cuda_ctx *ctx);

/* ---- device memory ----------------------------------------------------------------- */
int ds_cuda_malloc(ds_cuda_ctx *ctx, void **dptr, size_t bytes);
void ds_cuda_free(ds_cuda_ctx *ctx, void *dptr);               /* NULL is fine */
int ds_cuda_memset0(ds_cuda_ctx *ctx, void *dptr, size_t bytes); /* async on the stream */
/* Copies on the context's stream; to/from the host they complete before returning. */
int ds_cuda_to_device(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
int ds_cuda_to_host(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes);
int ds_cuda_copy(ds_cuda_ctx *ctx, void *dst, const void *src, size_t bytes); /* d -> d */
/* waits for the stream; reports any fault from kernels enqueued before */
int ds_cuda_sync(ds_cuda_ctx *ctx);

/* ---- dense (cuBLAS) ---------------------------------------------------------------- */
int ds_cuda_matmul_forward(ds_cuda_ctx *ctx, float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC);
int ds_cuda_matmul_backward(ds_cuda_ctx *ctx, float *dinp, int acc, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int N, int C,
                            int OC);

/* ---- dense in 16 bits (cuBLASLt) ----------------------------------------------------
 * bf16 / fp16 operands and results (h), fp32 accumulation on tensor cores, one rounding
 * per result; one algorithm per shape, so the same call gives the same bits.
 * Forward: out = inp @ W^T (+ bias) in the GEMM's epilogue; with pre_gelu ([N,OC], OC a
 * multiple of 8) the GELU too: pre_gelu receives inp @ W^T + bias and out = gelu(it)
 * (the tanh approximation, GPT-2's). Backward: dinp += dout @ W, or with pre_gelu (the
 * forward's, [N,C]) dinp = (dout @ W) * gelu'(pre_gelu), WRITTEN (=): the next layer's
 * GELU backward fused into this GEMM; dweight += dout^T @ inp; dbias += the column sums
 * of dout (fp32, fixed order, then rounded once). Any of dinp, dweight, dbias may be
 * NULL. */
int ds_cuda_matmul_forward_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *out, const uint16_t *inp,
                                const uint16_t *weight, const uint16_t *bias, uint16_t *pre_gelu,
                                int N, int C, int OC);
int ds_cuda_matmul_backward_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *dinp, uint16_t *dweight,
                                 uint16_t *dbias, const uint16_t *dout, const uint16_t *inp,
                                 const uint16_t *weight, const uint16_t *pre_gelu, int N, int C,
                                 int OC);

/* 16-bit weight and bias, fp32 or 16-bit activations (io16: DS_MM16_*): kernel_table.h's
 * matmul16 pair (its semantics). fp32 inp and dout (one chunk of DS_MATMUL16_COLS columns
 * at a time) are rounded to 16 bits into ws (ds_matmul16_workspace's DS_GEMM16_HALF
 * bytes; NULL where those are 0), 16-bit ones read in place (a 16-bit dout whose rows are
 * not 16-byte aligned copied chunk by chunk there: ds_matmul16_dout_copied), then the
 * GEMMs above with fp32 results for dinp and an fp32 out, a 16-bit out written by the
 * GEMM. */
int ds_cuda_matmul16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, const void *inp, int io16,
                             const uint16_t *weight, const uint16_t *bias, int N, int C, int OC,
                             void *ws);
int ds_cuda_matmul16_backward(ds_cuda_ctx *ctx, ds_half h, float *dinp, int acc, uint16_t *dweight,
                              uint16_t *dbias, const void *dout, const void *inp, int io16,
                              const uint16_t *weight, int N, int C, int OC, void *ws);

/* ---- elementwise ------------------------------------------------------------------- */
int ds_cuda_add_forward(ds_cuda_ctx *ctx, float *out, const float *a, const float *b, size_t n);
int ds_cuda_accumulate(ds_cuda_ctx *ctx, float *dst, const float *src, size_t n);
int ds_cuda_scale(ds_cuda_ctx *ctx, float *x, float s, size_t n);
int ds_cuda_gelu_forward(ds_cuda_ctx *ctx, float *out, const float *inp, size_t n);
int ds_cuda_gelu_backward(ds_cuda_ctx *ctx, float *dinp, int acc, const float *inp,
                          const float *dout, size_t n);
/* kernel_table.h's gelu16 pair: inp / out 16-bit of format h where in16 / out16, read and
 * written as they are */
int ds_cuda_gelu16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, const void *inp, size_t n,
                           int in16, int out16);
int ds_cuda_gelu16_backward(ds_cuda_ctx *ctx, ds_half h, void *dinp, int acc, const uint16_t *inp,
                            const float *dout, size_t n, int din16);

/* ---- normalisation ----------------------------------------------------------------- */
int ds_cuda_layernorm_forward(ds_cuda_ctx *ctx, float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias, int N,
                              int C, float eps);
int ds_cuda_layernorm_backward(ds_cuda_ctx *ctx, float *dinp, int acc, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C);

/* ---- embedding --------------------------------------------------------------------- */
/* ids must lie in [0, vocab); backward adds the rows of each id in order n = 0..N-1 (the
 * CPU kernel's order, so the sums have the same bits as on the CPU). */
int ds_cuda_embedding_forward(ds_cuda_ctx *ctx, float *out, const int32_t *ids,
                              const float *table, int N, int C);
int ds_cuda_embedding_backward(ds_cuda_ctx *ctx, float *dtable, const float *dout,
                               const int32_t *ids, int N, int C);

/* ---- embeddings and LayerNorm with 16-bit parameters (kernel_table.h's *16 entries,
 * their semantics; the embedding's sort in the context's scratch, LayerNorm's parameter
 * gradients in ws, ds_layernorm16_workspace(1, C) bytes) ------------------------------ */
int ds_cuda_embedding16_forward(ds_cuda_ctx *ctx, ds_half h, float *out, const int32_t *ids,
                                const uint16_t *table, int N, int C);
int ds_cuda_embedding16_backward(ds_cuda_ctx *ctx, ds_half h, uint16_t *dtable,
                                 const float *dout, const int32_t *ids, int N, int C);
int ds_cuda_posemb16_forward(ds_cuda_ctx *ctx, ds_half h, float *out, const float *inp,
                             const uint16_t *table, int B, int T, int C);
int ds_cuda_posemb16_backward(ds_cuda_ctx *ctx, ds_half h, uint16_t *dtable,
                              const float *dout, int B, int T, int C);
int ds_cuda_layernorm16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, float *mean,
                                float *rstd, const float *inp, const uint16_t *weight,
                                const uint16_t *bias, int N, int C, float eps, int out16);
int ds_cuda_layernorm16_backward(ds_cuda_ctx *ctx, ds_half h, float *dinp, int acc,
                                 uint16_t *dweight, uint16_t *dbias, const float *dout,
                                 const float *inp, const uint16_t *weight, const float *mean,
                                 const float *rstd, int N, int C, void *ws);

/* ---- attention --------------------------------------------------------------------- */
int ds_cuda_attention_forward(ds_cuda_ctx *ctx, float *out, float *att, const float *qkv,
                              int B, int T, int C, int NH);
int ds_cuda_attention_backward(ds_cuda_ctx *ctx, float *dqkv, int acc, float *scratch,
                               const float *dout, const float *qkv, const float *att, int B, int T,
                               int C, int NH);
/* With dropout on the probabilities (kernels.h's _dropout pair: the same masks, drawn
 * from the CPU's Philox stream). With p > 0 a block holds a row of T floats in shared
 * memory: T up to ~57000 on sm_90. */
int ds_cuda_attention_forward_dropout(ds_cuda_ctx *ctx, float *out, float *att, const float *qkv,
                                      int B, int T, int C, int NH, float p, ds_rng_key key);
int ds_cuda_attention_backward_dropout(ds_cuda_ctx *ctx, float *dqkv, int acc, float *scratch,
                                       const float *dout, const float *qkv, const float *att, int B,
                                       int T, int C, int NH, float p, ds_rng_key key);
/* Fused (FlashAttention's scheme in fp32, attention_flash.cu), with dropout p on the
 * probabilities under key (the _dropout pair's mask, drawn per tile; p = 0: none): the
 * same out as ds_attention_forward_dropout without the [B,NH,T,T] probabilities;
 * lse[B,NH,T] (natural log of each row's sum of exp(score), undropped) is what backward
 * needs. Backward: dqkv += the same gradients as ds_attention_backward_dropout,
 * recomputed from qkv, out and lse, the mask redrawn; scratch holds B*NH*T floats. Head
 * size C/NH up to 128. */
int ds_cuda_flash_attention_forward(ds_cuda_ctx *ctx, float *out, float *lse, const float *qkv,
                                    int B, int T, int C, int NH, float p, ds_rng_key key);
int ds_cuda_flash_attention_backward(ds_cuda_ctx *ctx, float *dqkv, int acc, float *scratch,
                                     const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int C, int NH, float p,
                                     ds_rng_key key);
/* The fused pair with 16-bit activations (kernel_table.h's attention16 entries): qkv and
 * out of format h where in16 / out16, loaded into shared memory and registers widened,
 * the output rounded as it is stored; lse, dout, dqkv and every statistic fp32. No
 * workspace. */
int ds_cuda_flash_attention16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, float *lse,
                                      const void *qkv, int B, int T, int C, int NH, float p,
                                      ds_rng_key key, int in16, int out16);
int ds_cuda_flash_attention16_backward(ds_cuda_ctx *ctx, ds_half h, void *dqkv, int acc,
                                       float *scratch, const float *dout, const void *qkv,
                                       const void *out, const float *lse, int B, int T, int C,
                                       int NH, float p, ds_rng_key key, int in16, int out16,
                                       int din16);

/* ---- loss -------------------------------------------------------------------------- */
/* total (host pointer, may be NULL) receives the sum of the losses in row order; asking
 * for it synchronises the stream. */
int ds_cuda_crossentropy_forward(ds_cuda_ctx *ctx, float *losses, const float *logits,
                                 const int32_t *targets, int N, int V, double *total);
int ds_cuda_crossentropy_backward(ds_cuda_ctx *ctx, float *dlogits, const float *logits,
                                  const int32_t *targets, float dloss, int N, int V);
int ds_cuda_crossentropy_forward_backward(ds_cuda_ctx *ctx, float *losses, float *dlogits,
                                          const float *logits, const int32_t *targets,
                                          float dloss, int N, int V, double *total);
/* Over 16-bit logits (kernel_table.h's crossentropy16): losses (may be NULL) from the
 * widened logits in fp32, dlogits (may be NULL, may be logits) rounded once per element. */
int ds_cuda_crossentropy16(ds_cuda_ctx *ctx, ds_half h, float *losses, uint16_t *dlogits,
                           const uint16_t *logits, const int32_t *targets, float dloss, int N,
                           int V);

/* ---- dropout (the CPU kernel's Philox stream: same key => same mask, bit for bit) ---- */
int ds_cuda_dropout_forward(ds_cuda_ctx *ctx, float *out, const float *inp, size_t n, float p,
                            ds_rng_key key);
int ds_cuda_dropout_backward(ds_cuda_ctx *ctx, float *dinp, int acc, const float *dout, size_t n,
                             float p, ds_rng_key key);
/* out = x + dropout(f): ds_dropout_add_forward's bits */
int ds_cuda_dropout_add_forward(ds_cuda_ctx *ctx, float *out, const float *x, const float *f,
                                size_t n, float p, ds_rng_key key);

/* ---- optimizer --------------------------------------------------------------------- */
int ds_cuda_adamw_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *m, float *v,
                         size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int t);
int ds_cuda_adamw_update_scaled(ds_cuda_ctx *ctx, float *param, const float *grad,
                                float grad_scale, float *m, float *v, size_t n, float lr,
                                float beta1, float beta2, float eps, float weight_decay, int t);
int ds_cuda_sgd_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *buf, size_t n,
                       float lr, float momentum, float weight_decay);
/* Sum of squares in double, fixed order. dev_out: a device double (no sync); or use
 * ds_cuda_sumsq_host, which synchronises and returns the value in *out. */
int ds_cuda_sumsq(ds_cuda_ctx *ctx, const float *x, size_t n, double *dev_out);
int ds_cuda_sumsq_host(ds_cuda_ctx *ctx, const float *x, size_t n, double *out);
/* The plain sum in double (the loss from the per-row losses), fixed order. */
int ds_cuda_sum(ds_cuda_ctx *ctx, const float *x, size_t n, double *dev_out);

/* ---- 16-bit working copies (kernels.h's ds_half_*: fp32 arithmetic, one rounding) ------ */
int ds_cuda_half_from_f32(ds_cuda_ctx *ctx, ds_half h, uint16_t *dst, const float *src, size_t n);
int ds_cuda_half_to_f32(ds_cuda_ctx *ctx, ds_half h, float *dst, const uint16_t *src, size_t n);
int ds_cuda_half_acc_f32(ds_cuda_ctx *ctx, ds_half h, uint16_t *acc, const float *x, size_t n);
int ds_cuda_half_add(ds_cuda_ctx *ctx, ds_half h, uint16_t *out, const uint16_t *a,
                     const uint16_t *b, size_t n);
int ds_cuda_half_scale(ds_cuda_ctx *ctx, ds_half h, uint16_t *x, float k, size_t n);
/* Sum of squares of the widened values in double, fixed order; inf or NaN anywhere makes
 * it non-finite: the fp16 overflow check and the squared norm in one device number. */
int ds_cuda_half_sumsq(ds_cuda_ctx *ctx, ds_half h, const uint16_t *x, size_t n,
                       double *dev_out);
int ds_cuda_adamw_update_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *w, const uint16_t *grad,
                              float grad_scale, float *master, float *m, float *v, size_t n,
                              float lr, float beta1, float beta2, float eps, float weight_decay,
                              int t);
int ds_cuda_sgd_update_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *w, const uint16_t *grad,
                            float grad_scale, float *master, float *buf, size_t n, float lr,
                            float momentum, float weight_decay);

/* AdamW on grad * grad_scale over spans of the buffers, each with its own weight decay
 * (kernels.h's ds_adamw_spans / ds_adamw_half_spans): half = -1 for fp32 (w the
 * parameter, master unused), DS_HALF_BF16 / DS_HALF_F16 for a 16-bit working copy. spans
 * is host memory, read before the call returns; one launch per 64 spans. */
int ds_cuda_adamw_spans(ds_cuda_ctx *ctx, int half, void *w, const void *grad, float grad_scale,
                        float *master, float *m, float *v, const ds_decay_span *spans,
                        int nspans, float lr, float beta1, float beta2, float eps, int t);

/* ---- the fused AdamW of a training step ----------------------------------------------
 * One pass over a flat shard: the gradients' scale is computed on the device from
 * *dev_sumsq, their squared norm as reduced (still multiplied by the loss scale), the
 * way ds.Model's train_step computes it on the host, in double: norm = sqrt(sumsq) /
 * loss_scale, clip = max_norm / (norm + 1e-6) when max_norm > 0 and norm > max_norm
 * (else 1), grad_scale = clip / loss_scale; when *dev_sumsq is not finite (an fp16
 * overflow) nothing is written: the step is skipped. half = DS_HALF_BF16 / DS_HALF_F16:
 * w and grad are 16-bit, master the fp32 weights, w = round16(master) written in the same
 * pass; half = -1: w and grad are fp32 and w is the parameter (master unused). */
int ds_cuda_adamw_fused(ds_cuda_ctx *ctx, int half, void *w, const void *grad,
                        const double *dev_sumsq, double loss_scale, double max_norm,
                        float *master, float *m, float *v, size_t n, float lr, float beta1,
                        float beta2, float eps, float weight_decay, int t);

/* ---- precision conversion (bf16/fp16 as uint16_t, round to nearest even) -------------- */
int ds_cuda_f32_to_bf16(ds_cuda_ctx *ctx, uint16_t *dst, const float *src, size_t n);
int ds_cuda_bf16_to_f32(ds_cuda_ctx *ctx, float *dst, const uint16_t *src, size_t n);
int ds_cuda_f32_to_f16(ds_cuda_ctx *ctx, uint16_t *dst, const float *src, size_t n);
int ds_cuda_f16_to_f32(ds_cuda_ctx *ctx, float *dst, const uint16_t *src, size_t n);

#endif
