/* The counting kernel table: every entry of ds_kernel_table adds its FLOPs and the bytes it
 * must move to its slot, then calls the device's own entry with the same arguments. Each
 * wrapper states its formula (kernel_count.h says what is counted): N rows, C columns (in),
 * OC (out), n elements; e(x): an activation's element size, 2 when 16-bit, else 4;
 * "r+w": a += output, read and written. Causal attention does, per causal GEMM (Q K^T,
 * P V, and each of backward's), B*NH*hs*T(T+1)/2 multiply-adds = B*C*T(T+1)/2. */
#include <stddef.h>

#include "kernel_count_impl.h"

typedef uint64_t u64;

#define SLOT(f) ((int)(offsetof(ds_kernel_table, f) / sizeof(void (*)(void))))
#define K ds_kcount_real()

static u64 e(int is16) { return is16 ? 2 : 4; }

/* FLOPs of one causal [T, T] GEMM per head, over B sequences: 2 * B*C*T(T+1)/2 */
static u64 causal_gemm(int B, int T, int C) { return (u64)B * (u64)C * (u64)T * ((u64)T + 1); }

/* ---- dense ---------------------------------------------------------------------------- */

/* 2*N*C*OC; reads inp, weight, bias; writes out (all fp32) */
static void count_matmul_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC) {
    u64 nc = (u64)N * C, wc = (u64)OC * C;
    ds_kcount_add(SLOT(matmul_forward), 2 * nc * OC, 4 * (nc + wc + (bias ? OC : 0)), 4 * (u64)N * OC);
    K->matmul_forward(out, inp, weight, bias, N, C, OC);
}

/* 2*N*C*OC per GEMM wanted (dinp, dweight); reads dout, and weight for dinp, inp for
 * dweight; dinp written (read too when acc), dweight, dbias r+w (all fp32) */
static void count_matmul_backward(float *dinp, int acc, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const float *weight, int N,
                                  int C, int OC) {
    u64 nc = (u64)N * C, wc = (u64)OC * C, gemm = 2 * nc * OC;
    u64 rd = 4 * (u64)N * OC, wr = 0, fl = 0;
    if (dinp) fl += gemm, rd += 4 * (wc + (acc ? nc : 0)), wr += 4 * nc;
    if (dweight) fl += gemm, rd += 4 * (nc + wc), wr += 4 * wc;
    if (dbias) rd += 4 * (u64)OC, wr += 4 * (u64)OC;
    ds_kcount_add(SLOT(matmul_backward), fl, rd, wr);
    K->matmul_backward(dinp, acc, dweight, dbias, dout, inp, weight, N, C, OC);
}

/* 2*N*C*OC; reads inp (e(in)), weight and bias (16-bit); writes out (e(out)) */
static void count_matmul16_forward(ds_half h, void *out, const void *inp, int io16,
                                   const uint16_t *weight, const uint16_t *bias, int N, int C,
                                   int OC, void *ws) {
    u64 nc = (u64)N * C, wc = (u64)OC * C;
    ds_kcount_add(SLOT(matmul16_forward), 2 * nc * OC,
                  e(io16 & DS_MM16_IN) * nc + 2 * (wc + (bias ? OC : 0)),
                  e(io16 & DS_MM16_OUT) * (u64)N * OC);
    K->matmul16_forward(h, out, inp, io16, weight, bias, N, C, OC, ws);
}

/* 2*N*C*OC per GEMM wanted; reads dout (e(out)), weight (16-bit) for dinp, inp (e(in))
 * for dweight; dinp fp32 written (read too when acc), dweight and dbias r+w 16-bit */
static void count_matmul16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                    uint16_t *dbias, const void *dout, const void *inp, int io16,
                                    const uint16_t *weight, int N, int C, int OC, void *ws) {
    u64 nc = (u64)N * C, wc = (u64)OC * C, gemm = 2 * nc * OC;
    u64 rd = e(io16 & DS_MM16_OUT) * (u64)N * OC, wr = 0, fl = 0;
    if (dinp) fl += gemm, rd += 2 * wc + (acc ? 4 * nc : 0), wr += 4 * nc;
    if (dweight) fl += gemm, rd += e(io16 & DS_MM16_IN) * nc + 2 * wc, wr += 2 * wc;
    if (dbias) rd += 2 * (u64)OC, wr += 2 * (u64)OC;
    ds_kcount_add(SLOT(matmul16_backward), fl, rd, wr);
    K->matmul16_backward(h, dinp, acc, dweight, dbias, dout, inp, io16, weight, N, C, OC, ws);
}

/* ---- elementwise (fp32 unless said) --------------------------------------------------- */

/* n adds; reads a, b; writes out */
static void count_add_forward(float *out, const float *a, const float *b, size_t n) {
    ds_kcount_add(SLOT(add_forward), n, 8 * (u64)n, 4 * (u64)n);
    K->add_forward(out, a, b, n);
}

/* n adds; reads src, dst r+w */
static void count_accumulate(float *dst, const float *src, size_t n) {
    ds_kcount_add(SLOT(accumulate), n, 8 * (u64)n, 4 * (u64)n);
    K->accumulate(dst, src, n);
}

/* n multiplies; x r+w */
static void count_scale(float *x, float s, size_t n) {
    ds_kcount_add(SLOT(scale), n, 4 * (u64)n, 4 * (u64)n);
    K->scale(x, s, n);
}

/* GELU (tanh form) nominally 8 FLOPs an element forward, 16 backward */
enum { GELU_FWD = 8, GELU_BWD = 16 };

/* reads inp; writes out */
static void count_gelu_forward(float *out, const float *inp, size_t n) {
    ds_kcount_add(SLOT(gelu_forward), GELU_FWD * (u64)n, 4 * (u64)n, 4 * (u64)n);
    K->gelu_forward(out, inp, n);
}

/* reads inp, dout; dinp written (read too when acc) */
static void count_gelu_backward(float *dinp, int acc, const float *inp, const float *dout,
                                size_t n) {
    ds_kcount_add(SLOT(gelu_backward), GELU_BWD * (u64)n, (acc ? 12 : 8) * (u64)n, 4 * (u64)n);
    K->gelu_backward(dinp, acc, inp, dout, n);
}

/* reads inp (e(in16)); writes out (e(out16)) */
static void count_gelu16_forward(ds_half h, void *out, const void *inp, size_t n, int in16,
                                 int out16) {
    ds_kcount_add(SLOT(gelu16_forward), GELU_FWD * (u64)n, e(in16) * n, e(out16) * n);
    K->gelu16_forward(h, out, inp, n, in16, out16);
}

/* reads inp (16-bit), dout; dinp written (e(din16); read too when acc, fp32 only) */
static void count_gelu16_backward(ds_half h, void *dinp, int acc, const uint16_t *inp,
                                  const float *dout, size_t n, int din16) {
    int added = acc && !din16;
    ds_kcount_add(SLOT(gelu16_backward), GELU_BWD * (u64)n, (added ? 10 : 6) * (u64)n,
                  e(din16) * n);
    K->gelu16_backward(h, dinp, acc, inp, dout, n, din16);
}

/* ---- normalisation: nominally 8 FLOPs an element forward (mean, variance, normalise,
 * affine), 12 backward ---------------------------------------------------------------- */
enum { LN_FWD = 8, LN_BWD = 12 };

/* reads inp, weight, bias; writes out, mean, rstd */
static void count_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int N, int C,
                                    float eps) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(layernorm_forward), LN_FWD * nc, 4 * (nc + 2 * (u64)C), 4 * (nc + 2 * (u64)N));
    K->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
}

/* reads dout, inp, weight, mean, rstd; dinp written (read too when acc), dweight, dbias
 * r+w (those given) */
static void count_layernorm_backward(float *dinp, int acc, float *dweight, float *dbias,
                                     const float *dout, const float *inp, const float *weight,
                                     const float *mean, const float *rstd, int N, int C) {
    u64 nc = (u64)N * C, rd = 4 * (2 * nc + C + 2 * (u64)N), wr = 0;
    if (dinp) rd += acc ? 4 * nc : 0, wr += 4 * nc;
    if (dweight) rd += 4 * (u64)C, wr += 4 * (u64)C;
    if (dbias) rd += 4 * (u64)C, wr += 4 * (u64)C;
    ds_kcount_add(SLOT(layernorm_backward), LN_BWD * nc, rd, wr);
    K->layernorm_backward(dinp, acc, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

/* ---- embedding: the N rows ids name (a row named twice is read twice: a gather, and a
 * scatter-add per position backward) ---------------------------------------------------- */

/* reads ids, N table rows; writes out */
static void count_embedding_forward(float *out, const int32_t *ids, const float *table, int N,
                                    int C) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(embedding_forward), 0, 4 * ((u64)N + nc), 4 * nc);
    K->embedding_forward(out, ids, table, N, C);
}

/* N*C adds; reads dout, ids; N rows of dtable r+w */
static void count_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N,
                                     int C) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(embedding_backward), nc, 4 * ((u64)N + 2 * nc), 4 * nc);
    K->embedding_backward(dtable, dout, ids, N, C);
}

/* reads ids, N 16-bit rows; writes out fp32 */
static void count_embedding16_forward(ds_half h, float *out, const int32_t *ids,
                                      const uint16_t *table, int N, int C) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(embedding16_forward), 0, 4 * (u64)N + 2 * nc, 4 * nc);
    K->embedding16_forward(h, out, ids, table, N, C);
}

/* N*C adds; reads dout, ids; N 16-bit rows of dtable r+w */
static void count_embedding16_backward(ds_half h, uint16_t *dtable, const float *dout,
                                       const int32_t *ids, int N, int C, void *ws) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(embedding16_backward), nc, 4 * ((u64)N + nc) + 2 * nc, 2 * nc);
    K->embedding16_backward(h, dtable, dout, ids, N, C, ws);
}

/* B*T*C adds; reads inp, table [T, C] 16-bit; writes out */
static void count_posemb16_forward(ds_half h, float *out, const float *inp, const uint16_t *table,
                                   int B, int T, int C) {
    u64 n = (u64)B * T * C, tc = (u64)T * C;
    ds_kcount_add(SLOT(posemb16_forward), n, 4 * n + 2 * tc, 4 * n);
    K->posemb16_forward(h, out, inp, table, B, T, C);
}

/* B*T*C adds; reads dout; dtable [T, C] 16-bit r+w */
static void count_posemb16_backward(ds_half h, uint16_t *dtable, const float *dout, int B, int T,
                                    int C) {
    u64 n = (u64)B * T * C, tc = (u64)T * C;
    ds_kcount_add(SLOT(posemb16_backward), n, 4 * n + 2 * tc, 2 * tc);
    K->posemb16_backward(h, dtable, dout, B, T, C);
}

/* reads inp, weight and bias 16-bit; writes out (e(out16)), mean, rstd */
static void count_layernorm16_forward(ds_half h, void *out, float *mean, float *rstd,
                                      const float *inp, const uint16_t *weight,
                                      const uint16_t *bias, int N, int C, float eps, int out16,
                                      void *ws) {
    u64 nc = (u64)N * C;
    ds_kcount_add(SLOT(layernorm16_forward), LN_FWD * nc, 4 * nc + 4 * (u64)C,
                  e(out16) * nc + 8 * (u64)N);
    K->layernorm16_forward(h, out, mean, rstd, inp, weight, bias, N, C, eps, out16, ws);
}

/* reads dout, inp, weight (16-bit), mean, rstd; dinp fp32 written (read too when acc),
 * dweight and dbias 16-bit r+w (those given) */
static void count_layernorm16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                       uint16_t *dbias, const float *dout, const float *inp,
                                       const uint16_t *weight, const float *mean, const float *rstd,
                                       int N, int C, void *ws) {
    u64 nc = (u64)N * C, rd = 8 * nc + 2 * (u64)C + 8 * (u64)N, wr = 0;
    if (dinp) rd += acc ? 4 * nc : 0, wr += 4 * nc;
    if (dweight) rd += 2 * (u64)C, wr += 2 * (u64)C;
    if (dbias) rd += 2 * (u64)C, wr += 2 * (u64)C;
    ds_kcount_add(SLOT(layernorm16_backward), LN_BWD * nc, rd, wr);
    K->layernorm16_backward(h, dinp, acc, dweight, dbias, dout, inp, weight, mean, rstd, N, C, ws);
}

/* ---- attention: qkv [N, 3C], out [N, C], N = B*T ---------------------------------------- */

/* The reference pair keeps att [B, NH, T, T] (probabilities, zeros above the diagonal):
 * forward 2 causal GEMMs, reads qkv, writes out and att; backward 4 causal GEMMs
 * (dV, dP, dQ, dK), reads dout, qkv, att, writes then reads its [B, NH, T, T] scratch
 * (the scores' gradient), dqkv written (read too when acc). Dropout redraws its mask
 * from the key: the same. */
static void attn_ref_fwd(int slot, int B, int T, int C, int NH) {
    u64 nc = (u64)B * T * C, tt = (u64)B * NH * T * T;
    ds_kcount_add(slot, 2 * causal_gemm(B, T, C), 4 * 3 * nc, 4 * (nc + tt));
}

static void attn_ref_bwd(int slot, int acc, int B, int T, int C, int NH) {
    u64 nc = (u64)B * T * C, tt = (u64)B * NH * T * T;
    ds_kcount_add(slot, 4 * causal_gemm(B, T, C), 4 * (nc + 3 * nc + tt + tt + (acc ? 3 * nc : 0)),
                  4 * (tt + 3 * nc));
}

static void count_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                    int NH) {
    attn_ref_fwd(SLOT(attention_forward), B, T, C, NH);
    K->attention_forward(out, att, qkv, B, T, C, NH);
}

static void count_attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                                     const float *qkv, const float *att, int B, int T, int C,
                                     int NH) {
    attn_ref_bwd(SLOT(attention_backward), acc, B, T, C, NH);
    K->attention_backward(dqkv, acc, scratch, dout, qkv, att, B, T, C, NH);
}

static void count_attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T,
                                            int C, int NH, float p, ds_rng_key key) {
    attn_ref_fwd(SLOT(attention_forward_dropout), B, T, C, NH);
    K->attention_forward_dropout(out, att, qkv, B, T, C, NH, p, key);
}

static void count_attention_backward_dropout(float *dqkv, int acc, float *scratch,
                                             const float *dout, const float *qkv, const float *att,
                                             int B, int T, int C, int NH, float p, ds_rng_key key) {
    attn_ref_bwd(SLOT(attention_backward_dropout), acc, B, T, C, NH);
    K->attention_backward_dropout(dqkv, acc, scratch, dout, qkv, att, B, T, C, NH, p, key);
}

/* The fused (flash) pair, nothing [T, T] in memory: forward 2 causal GEMMs, reads qkv
 * (e(in)), writes out (e(out)) and lse [B, NH, T]; backward 5 causal GEMMs (the scores
 * recomputed, then dV, dP, dQ, dK) and 2*N*C for its row term D = rowsum(dout * out),
 * reads dout, qkv, out, lse, writes then reads D (scratch, [B, NH, T]), writes dqkv
 * (e(din16); reads it too when acc, fp32 only). Dropout (p > 0) adds no traffic: each
 * tile draws its mask from the key (integer work, not counted as FLOPs), in forward and
 * again in backward. */
static void attn_fused_fwd(int slot, int B, int T, int C, int NH, int in16, int out16) {
    u64 nc = (u64)B * T * C, rows = (u64)B * NH * T;
    ds_kcount_add(slot, 2 * causal_gemm(B, T, C), e(in16) * 3 * nc, e(out16) * nc + 4 * rows);
}

static void attn_fused_bwd(int slot, int acc, int B, int T, int C, int NH, int in16, int out16,
                           int din16) {
    u64 nc = (u64)B * T * C, rows = (u64)B * NH * T;
    ds_kcount_add(slot, 5 * causal_gemm(B, T, C) + 2 * nc,
                  4 * nc + e(in16) * 3 * nc + e(out16) * nc + 4 * rows + 4 * rows +
                      (acc && !din16 ? 4 * 3 * nc : 0),
                  4 * rows + e(din16) * 3 * nc);
}

static void count_attention_forward_fused(float *out, float *lse, const float *qkv, int B, int T,
                                          int C, int NH, float p, ds_rng_key key) {
    attn_fused_fwd(SLOT(attention_forward_fused), B, T, C, NH, 0, 0);
    K->attention_forward_fused(out, lse, qkv, B, T, C, NH, p, key);
}

static void count_attention_backward_fused(float *dqkv, int acc, float *scratch, const float *dout,
                                           const float *qkv, const float *out, const float *lse,
                                           int B, int T, int C, int NH, float p, ds_rng_key key) {
    attn_fused_bwd(SLOT(attention_backward_fused), acc, B, T, C, NH, 0, 0, 0);
    K->attention_backward_fused(dqkv, acc, scratch, dout, qkv, out, lse, B, T, C, NH, p, key);
}

static void count_attention16_forward_fused(ds_half h, void *out, float *lse, const void *qkv,
                                            int B, int T, int C, int NH, float p, ds_rng_key key,
                                            int in16, int out16, void *ws) {
    attn_fused_fwd(SLOT(attention16_forward_fused), B, T, C, NH, in16, out16);
    K->attention16_forward_fused(h, out, lse, qkv, B, T, C, NH, p, key, in16, out16, ws);
}

static void count_attention16_backward_fused(ds_half h, void *dqkv, int acc, float *scratch,
                                             const float *dout, const void *qkv, const void *out,
                                             const float *lse, int B, int T, int C, int NH,
                                             float p, ds_rng_key key, int in16, int out16,
                                             int din16, void *ws) {
    attn_fused_bwd(SLOT(attention16_backward_fused), acc, B, T, C, NH, in16, out16, din16);
    K->attention16_backward_fused(h, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C, NH, p, key,
                                  in16, out16, din16, ws);
}

/* ---- loss: nominally 4 FLOPs a logit (max, exp, sum; the gradient), N*V logits ---------- */
enum { XENT = 4 };

/* reads logits, targets; writes losses and the sum (8) */
static void count_crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                                       int N, int V, double *sum) {
    u64 nv = (u64)N * V;
    ds_kcount_add(SLOT(crossentropy_forward), XENT * nv, 4 * (nv + N), 4 * (u64)N + 8);
    K->crossentropy_forward(losses, logits, targets, N, V, sum);
}

/* reads logits, targets; writes dlogits (=) */
static void count_crossentropy_backward(float *dlogits, const float *logits,
                                        const int32_t *targets, float dloss, int N, int V) {
    u64 nv = (u64)N * V;
    ds_kcount_add(SLOT(crossentropy_backward), XENT * nv, 4 * (nv + N), 4 * nv);
    K->crossentropy_backward(dlogits, logits, targets, dloss, N, V);
}

/* one pass: reads logits, targets; writes losses, dlogits, the sum */
static void count_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                                const int32_t *targets, float dloss, int N, int V,
                                                double *sum) {
    u64 nv = (u64)N * V;
    ds_kcount_add(SLOT(crossentropy_forward_backward), XENT * nv, 4 * (nv + N),
                  4 * (nv + N) + 8);
    K->crossentropy_forward_backward(losses, dlogits, logits, targets, dloss, N, V, sum);
}

/* reads 16-bit logits, targets; writes losses and the sum (when given), dlogits 16-bit
 * (when given) */
static void count_crossentropy16(ds_half h, float *losses, uint16_t *dlogits,
                                 const uint16_t *logits, const int32_t *targets, float dloss,
                                 int N, int V, double *sum) {
    u64 nv = (u64)N * V;
    ds_kcount_add(SLOT(crossentropy16), XENT * nv, 2 * nv + 4 * (u64)N,
                  (losses ? 4 * (u64)N : 0) + (dlogits ? 2 * nv : 0) + (sum ? 8 : 0));
    K->crossentropy16(h, losses, dlogits, logits, targets, dloss, N, V, sum);
}

/* ---- dropout: the mask drawn from the key, n multiplies ------------------------------- */

/* reads inp; writes out */
static void count_dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key) {
    ds_kcount_add(SLOT(dropout_forward), n, 4 * (u64)n, 4 * (u64)n);
    K->dropout_forward(out, inp, n, p, key);
}

/* reads dout; dinp written (read too when acc) */
static void count_dropout_backward(float *dinp, int acc, const float *dout, size_t n, float p,
                                   ds_rng_key key) {
    ds_kcount_add(SLOT(dropout_backward), n, (acc ? 8 : 4) * (u64)n, 4 * (u64)n);
    K->dropout_backward(dinp, acc, dout, n, p, key);
}

/* reads x and f; writes out: dropout_forward's multiply and add_forward's add, without the
 * buffer between them (4 n bytes written, 4 n read fewer than the pair) */
static void count_dropout_add_forward(float *out, const float *x, const float *f, size_t n,
                                      float p, ds_rng_key key) {
    ds_kcount_add(SLOT(dropout_add_forward), 2 * (u64)n, 8 * (u64)n, 4 * (u64)n);
    K->dropout_add_forward(out, x, f, n, p, key);
}

/* ---- optimizer: AdamW nominally 16 FLOPs an element, SGD 6 ------------------------------ */
enum { ADAMW = 16, SGD = 6 };

/* reads param, grad, m, v; writes param, m, v */
static void count_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                               float lr, float beta1, float beta2, float eps, float weight_decay,
                               int t) {
    ds_kcount_add(SLOT(adamw_update), ADAMW * (u64)n, 16 * (u64)n, 12 * (u64)n);
    K->adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}

/* the elements of every span */
static u64 span_elems(const ds_decay_span *spans, int nspans) {
    u64 n = 0;
    for (int k = 0; k < nspans; k++) n += spans[k].n;
    return n;
}

static void count_adamw_spans(float *param, const float *grad, float grad_scale, float *m, float *v,
                              const ds_decay_span *spans, int nspans, float lr, float beta1,
                              float beta2, float eps, int t) {
    u64 n = span_elems(spans, nspans);
    ds_kcount_add(SLOT(adamw_spans), ADAMW * n, 16 * n, 12 * n);
    K->adamw_spans(param, grad, grad_scale, m, v, spans, nspans, lr, beta1, beta2, eps, t);
}

/* reads param, grad, buf; writes param, buf */
static void count_sgd_update(float *param, const float *grad, float *buf, size_t n, float lr,
                             float momentum, float weight_decay) {
    ds_kcount_add(SLOT(sgd_update), SGD * (u64)n, 12 * (u64)n, 8 * (u64)n);
    K->sgd_update(param, grad, buf, n, lr, momentum, weight_decay);
}

/* 2n; reads x; writes the sum (8) */
static void count_sumsq(const float *x, size_t n, double *out) {
    ds_kcount_add(SLOT(sumsq), 2 * (u64)n, 4 * (u64)n, 8);
    K->sumsq(x, n, out);
}

/* ---- 16-bit working copies -------------------------------------------------------------- */

/* reads fp32; writes 16-bit */
static void count_half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n) {
    ds_kcount_add(SLOT(half_from_f32), 0, 4 * (u64)n, 2 * (u64)n);
    K->half_from_f32(h, dst, src, n);
}

/* reads 16-bit; writes fp32 */
static void count_half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n) {
    ds_kcount_add(SLOT(half_to_f32), 0, 2 * (u64)n, 4 * (u64)n);
    K->half_to_f32(h, dst, src, n);
}

/* n adds; reads x fp32; acc 16-bit r+w */
static void count_half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n) {
    ds_kcount_add(SLOT(half_acc_f32), n, 6 * (u64)n, 2 * (u64)n);
    K->half_acc_f32(h, acc, x, n);
}

/* n adds; reads a, b; writes out (16-bit) */
static void count_half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b,
                           size_t n) {
    ds_kcount_add(SLOT(half_add), n, 4 * (u64)n, 2 * (u64)n);
    K->half_add(h, out, a, b, n);
}

/* n multiplies; x r+w (16-bit) */
static void count_half_scale(ds_half h, uint16_t *x, float k, size_t n) {
    ds_kcount_add(SLOT(half_scale), n, 2 * (u64)n, 2 * (u64)n);
    K->half_scale(h, x, k, n);
}

/* 2n; reads x (16-bit); writes the sum (8) */
static void count_half_sumsq(ds_half h, const uint16_t *x, size_t n, double *out) {
    ds_kcount_add(SLOT(half_sumsq), 2 * (u64)n, 2 * (u64)n, 8);
    K->half_sumsq(h, x, n, out);
}

/* reads grad (16-bit), master, m, v; writes w (16-bit, from the master: not read),
 * master, m, v */
static void count_adamw_half_spans(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                                   float *master, float *m, float *v, const ds_decay_span *spans,
                                   int nspans, float lr, float beta1, float beta2, float eps,
                                   int t) {
    u64 n = span_elems(spans, nspans);
    ds_kcount_add(SLOT(adamw_half_spans), ADAMW * n, 14 * n, 14 * n);
    K->adamw_half_spans(h, w, grad, grad_scale, master, m, v, spans, nspans, lr, beta1, beta2,
                        eps, t);
}

/* reads grad (16-bit), master, buf; writes w (16-bit), master, buf */
static void count_sgd_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                                  float *master, float *buf, size_t n, float lr, float momentum,
                                  float weight_decay) {
    ds_kcount_add(SLOT(sgd_update_half), SGD * (u64)n, 10 * (u64)n, 10 * (u64)n);
    K->sgd_update_half(h, w, grad, grad_scale, master, buf, n, lr, momentum, weight_decay);
}

/* ---- the table ------------------------------------------------------------------------- */

/* Every entry of ds_kernel_table, in struct order. An entry added to kernel_table.h and
 * not here fails the static assertion below; one here without its count_ wrapper fails to
 * compile; tests/unit/engine/test_engine_kernel_count.c checks every pointer at run time. */
#define DS_KCOUNT_ENTRIES(X)                                                                      \
    X(matmul_forward) X(matmul_backward) X(matmul16_forward) X(matmul16_backward)                 \
    X(add_forward) X(accumulate) X(scale) X(gelu_forward) X(gelu_backward) X(gelu16_forward)      \
    X(gelu16_backward) X(layernorm_forward) X(layernorm_backward) X(embedding_forward)            \
    X(embedding_backward) X(embedding16_forward) X(embedding16_backward) X(posemb16_forward)      \
    X(posemb16_backward) X(layernorm16_forward) X(layernorm16_backward) X(attention_forward)      \
    X(attention_backward) X(attention_forward_dropout) X(attention_backward_dropout)              \
    X(attention_forward_fused) X(attention_backward_fused) X(attention16_forward_fused)           \
    X(attention16_backward_fused) X(crossentropy_forward) X(crossentropy_backward)                \
    X(crossentropy_forward_backward) X(crossentropy16) X(dropout_forward) X(dropout_backward)     \
    X(dropout_add_forward) X(adamw_update) X(adamw_spans) X(sgd_update) X(sumsq)                  \
    X(half_from_f32) X(half_to_f32) X(half_acc_f32) X(half_add) X(half_scale) X(half_sumsq)       \
    X(adamw_half_spans) X(sgd_update_half)

#define ONE(f) +1
_Static_assert(DS_KCOUNT_NKERNELS == 0 DS_KCOUNT_ENTRIES(ONE),
               "an entry of ds_kernel_table is not counted: add it to DS_KCOUNT_ENTRIES with "
               "its count_ wrapper (kernels/kernel_count_table.c)");

#define WRAP(f) .f = count_##f,
const ds_kernel_table ds_kcount_table = {DS_KCOUNT_ENTRIES(WRAP)};

#define NAME(f) [SLOT(f)] = #f,
const char *const ds_kcount_kernel_names[DS_KCOUNT_NKERNELS] = {DS_KCOUNT_ENTRIES(NAME)};
