/* Causal multi-head self-attention on packed qkv[B,T,3C].
 *
 * Work is split by (batch, head): one head is one thread's job, and every sum inside it
 * runs in a fixed order, so results do not depend on the thread count.
 *
 * Inside a head every product is a small matrix product C (+)= A.B over a causal range of
 * k, done by tile(): an MR x NR block of C stays in registers while k streams, so each
 * loaded element of B feeds MR multiply-adds and each element of A feeds NR. Each output
 * element is still the sum over k in ascending order, starting from 0 (or from the value
 * already in C for gradients): the same sums as one row at a time. The rows of a block
 * differ in where their causal range starts or ends; the steps where only some rows are
 * in range run row by row, so nothing outside the range is ever added, not even a zero.
 *
 * Forward, per block of MR query rows: scores = (q*scale).K^T into a small buffer, softmax
 * into att (the rows' sums interleave, each still in order u = 0..t), then out = P.V.
 * Backward, per block of rows: dy.V^T, turned into the softmax gradients dP (scratch), and
 * dq = dP.K; then per block of key rows dk = dP^T.Q and dv = P^T.dy, reading P and dP by
 * columns. The B operands (K^T, V^T, and the rows of Q, K,
 * V, dy) are first packed per head into a thread's workspace, zero-padded to whole tiles,
 * so tile() has no short-column remainder. The per-head functions are SIMD-cloned, and
 * their helpers are forced inline so each clone gets its own copy.
 *
 * The results are bit-identical to the earlier one-row-at-a-time kernel (same sums, same
 * multiply-add contractions); keep it so when changing the loops: in particular the
 * softmax-gradient dot stays one loop per row, whose vector/leftover split the compiler
 * picks and which the bits depend on.
 *
 * Dropout on the probabilities (the _dropout pair) multiplies each row of P by its mask
 * row, drawn as ds_dropout_forward draws the elements of the [B,NH,T,T] tensor
 * (kernel_math.h's ds_km_attn_elem, which the fused kernels share), before it meets V. att keeps P itself: backward redraws the mask rows, multiplies
 * dy.V by them (the gradient of P) and combines dy with the dropped rows for dv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_tile.h"
#include "kernels.h"

static size_t forward_workspace(att_dims d) {
    return (size_t)d.hs * d.Tp + 2 * (size_t)d.T * d.hsp + 2 * (size_t)MR * d.Tp +
           (size_t)d.Tp;
}

DS_SIMD static void forward_head(float *out, float *att, const float *qkv, int b, int h,
                                 att_dims d, const ds_km_drop *dr, float *ws) {
    int T = d.T, C = d.C, hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    float *Kt = ws, *V = Kt + (size_t)hs * Tp, *qs = V + (size_t)T * hsp;
    float *S = qs + (size_t)T * hsp, *W = S + MR * Tp, *m = W + MR * Tp; /* scores, dropped P, mask */
    pack_transposed(Kt, base + C, d.C3, T, hs, Tp);
    pack_rows(V, base + 2 * C, d.C3, T, hs, hsp, 1.0f);
    pack_rows(qs, base, d.C3, T, hs, hsp, d.scale); /* q * scale, rounded, as the scores use it */
    size_t head = ((size_t)b * d.NH + h) * T;
    for (int t0 = 0; t0 < T; t0 += MR) {
        int mr = T - t0 < MR ? T - t0 : MR;
        amat Q = {qs + (size_t)t0 * hsp, (size_t)hsp, 1};
        krange all = {0, 0, hs, 0};
        for (int u0 = 0; u0 < t0 + mr; u0 += NR)
            tile(S + u0, Tp, mr, NR, 0, Q, Kt + u0, Tp, all);
        float *A = att + (head + t0) * T;
        softmax_rows(A, NULL, S, t0, mr, T, Tp);
        for (int r = 0; r < mr && dr->p > 0.0f; r++) {
            int t = t0 + r;
            mask_row(m, dr, b, h, t, t + 1, d);
            for (int u = 0; u <= t; u++) W[r * Tp + u] = A[(size_t)r * T + u] * m[u];
        }
        amat P = dr->p > 0.0f ? (amat){W, (size_t)Tp, 1} : (amat){A, (size_t)T, 1};
        float *o = out + ((size_t)b * T + t0) * C + (size_t)h * hs;
        krange causal = {0, 0, t0 + 1, 1}; /* row t sums over u <= t */
        for (int i0 = 0; i0 < hs; i0 += NR)
            tile(o + i0, C, mr, hs - i0 < NR ? hs - i0 : NR, 0, P, V + i0, hsp, causal);
    }
}

static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH, const ds_km_drop *dr) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = att_dims_of(B, T, C, NH);
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel if (work > 4 * DS_PAR_MIN)
    {
        float *ws = att_workspace(forward_workspace(d));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) forward_head(out, att, qkv, b, h, d, dr, ws);
        free(ws);
    }
}

void ds_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                          int NH) {
    ds_km_drop none = att_drop_of(0.0f, (ds_rng_key){0});
    attention_forward(out, att, qkv, B, T, C, NH, &none);
}

void ds_attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH, float p, ds_rng_key key) {
    ds_km_drop dr = att_drop_of(p, key);
    attention_forward(out, att, qkv, B, T, C, NH, &dr);
}

/* rows t0.. of dP (stride T) = a * (g - sum(a * g)) * scale over u <= t, zeros after, for
 * g = dy.V in G (stride Tp) and a the rows of att from A */
HEAD_INLINE void softmax_grad_rows(float *dP, const float *G, const float *A, int t0, int mr,
                                   int T, int Tp, float scale) {
    for (int r = 0; r < mr; r++) {
        const float *a = A + (size_t)r * T, *g = G + (size_t)r * Tp;
        float *dp = dP + (size_t)r * T;
        /* one row at a time: how the compiler splits this loop (vector products, then
         * a multiply-add per leftover element) is part of the result's bits */
        float dot = 0.0f;
        for (int u = 0; u <= t0 + r; u++) dot += a[u] * g[u];
        for (int u = 0; u <= t0 + r; u++) dp[u] = a[u] * (g[u] - dot) * scale;
        for (int u = t0 + r + 1; u < T; u++) dp[u] = 0.0f;
    }
}

static size_t backward_workspace(att_dims d, int drop) {
    return (size_t)d.hs * d.Tp + 3 * (size_t)d.T * d.hsp + (size_t)MR * d.Tp + (size_t)d.Tp +
           (drop ? (size_t)d.T * d.T : 0);
}

/* dq for rows t0.. (written, or added to with acc) and the softmax gradients dP of those
 * rows */
HEAD_INLINE void backward_rows(float *dP, float *dq, int acc, const float *A, float *Am,
                               const float *K, const float *Vt, const float *dY, float *S, float *m,
                               int t0, int b, int h, att_dims d, const ds_km_drop *dr) {
    int T = d.T, hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    int mr = T - t0 < MR ? T - t0 : MR;
    amat G = {dY + (size_t)t0 * hsp, (size_t)hsp, 1};
    krange all = {0, 0, hs, 0};
    for (int u0 = 0; u0 < t0 + mr; u0 += NR) tile(S + u0, Tp, mr, NR, 0, G, Vt + u0, Tp, all);
    for (int r = 0; r < mr && dr->p > 0.0f; r++) { /* dy.V is the gradient of the dropped
                                                      * row: times the mask for P's */
        int t = t0 + r;
        const float *a = A + (size_t)t * T;
        float *g = S + r * Tp, *am = Am + (size_t)t * T;
        mask_row(m, dr, b, h, t, t + 1, d);
        for (int u = 0; u <= t; u++) {
            g[u] *= m[u];
            am[u] = a[u] * m[u];
        }
    }
    softmax_grad_rows(dP + (size_t)t0 * T, S, A + (size_t)t0 * T, t0, mr, T, Tp, d.scale);
    amat P = {dP + (size_t)t0 * T, (size_t)T, 1};
    krange causal = {0, 0, t0 + 1, 1};
    for (int i0 = 0; i0 < hs; i0 += NR)
        tile(dq + t0 * d.C3 + i0, d.C3, mr, hs - i0 < NR ? hs - i0 : NR, acc, P, K + i0, hsp,
             causal);
}

DS_SIMD static void backward_head(float *dqkv, int acc, float *scratch, const float *dout,
                                  const float *qkv, const float *att, int b, int h, att_dims d,
                                  const ds_km_drop *dr, float *ws) {
    int T = d.T, C = d.C, hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    size_t head = ((size_t)b * d.NH + h) * T * T;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    float *dbase = dqkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    const float *A = att + head;
    float *dP = scratch + head; /* [T][T]: softmax gradients, pre-scaled */
    float *Vt = ws, *K = Vt + (size_t)hs * Tp, *Q = K + (size_t)T * hsp, *dY = Q + (size_t)T * hsp;
    float *S = dY + (size_t)T * hsp, *m = S + MR * Tp; /* dy.V of a block of rows, mask row */
    float *Am = m + Tp; /* with dropout: [T][T], the dropped probabilities (what met V) */
    pack_transposed(Vt, base + 2 * C, d.C3, T, hs, Tp);
    pack_rows(K, base + C, d.C3, T, hs, hsp, 1.0f);
    pack_rows(Q, base, d.C3, T, hs, hsp, 1.0f);
    pack_rows(dY, dout + (size_t)b * T * C + (size_t)h * hs, (size_t)C, T, hs, hsp, 1.0f);
    for (int t0 = 0; t0 < T; t0 += MR)
        backward_rows(dP, dbase, acc, A, Am, K, Vt, dY, S, m, t0, b, h, d, dr);
    const float *AV = dr->p > 0.0f ? Am : A; /* the probabilities that met V */
    for (int u0 = 0; u0 < T; u0 += MR) { /* dk[u] += sum_t dP[t][u] q[t]; dv[u] += sum_t a[t][u] dy[t] */
        int mr = T - u0 < MR ? T - u0 : MR;
        amat dPt = {dP + u0, 1, (size_t)T}, Pt = {AV + u0, 1, (size_t)T};
        krange causal = {u0, 1, T, 0}; /* row u sums over t >= u */
        float *dk = dbase + u0 * d.C3 + C, *dv = dk + C;
        for (int i0 = 0; i0 < hs; i0 += NR) {
            int nc = hs - i0 < NR ? hs - i0 : NR;
            tile(dk + i0, d.C3, mr, nc, acc, dPt, Q + i0, hsp, causal);
            tile(dv + i0, d.C3, mr, nc, acc, Pt, dY + i0, hsp, causal);
        }
    }
}

static void attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH,
                               const ds_km_drop *dr) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = att_dims_of(B, T, C, NH);
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel if (work > 2 * DS_PAR_MIN)
    {
        float *ws = att_workspace(backward_workspace(d, dr->p > 0.0f));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                backward_head(dqkv, acc, scratch, dout, qkv, att, b, h, d, dr, ws);
        free(ws);
    }
}

void ds_attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                           const float *qkv, const float *att, int B, int T, int C, int NH) {
    ds_km_drop none = att_drop_of(0.0f, (ds_rng_key){0});
    attention_backward(dqkv, acc, scratch, dout, qkv, att, B, T, C, NH, &none);
}

void ds_attention_backward_dropout(float *dqkv, int acc, float *scratch, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C, int NH,
                                   float p, ds_rng_key key) {
    ds_km_drop dr = att_drop_of(p, key);
    attention_backward(dqkv, acc, scratch, dout, qkv, att, B, T, C, NH, &dr);
}
