/* Causal attention without the [B,NH,T,T] probabilities: the fused pair (kernels.h), the
 * CPU formulation of what kernels/cuda/attention_flash.cu does on a GPU.
 *
 * Forward is the reference forward (attention.c) with the probabilities of a block of MR
 * rows kept in a thread's buffer instead of att: the same scores, softmax and P.V, so out
 * has the reference's bits; each row also leaves lse = max + log(sum of exp), the one
 * number backward needs to recompute its probabilities, P = exp(score - lse).
 *
 * Backward walks the query rows in chunks of CHUNK rows. Per block of MR rows it
 * recomputes the scores (the forward's scaled q times K^T, so the same bits) and dy.V^T,
 * turns them into P and the softmax gradients dS in the chunk's buffers, and adds
 * dq += dS.K. At the end of a chunk the key rows it reaches get dk += dS^T.Q and
 * dv += P^T.dy over the chunk's rows. tile() adds k in ascending order onto what C held,
 * so summing chunk after chunk is the reference's one sum over t = u..T-1; only P's
 * recomputation (exp(s - lse) instead of exp(s - max) / sum) separates the bits from
 * the reference's. A thread holds the packed operands of one head and 2 x CHUNK rows of
 * probabilities: memory grows with T, not T^2.
 *
 * Dropout (p > 0) masks the probabilities after lse is taken (the statistics are the
 * undropped ones): forward multiplies each row of P by its mask row before P.V, as the
 * reference does, so out keeps the reference's bits. Backward redraws each row's mask
 * (kernel_math.h's mapping): dy.V times the mask is the gradient of P, whose dot with P
 * is rowsum(dy * out) as without dropout, and P times the mask is what meets dy for dv. */
#include <math.h>
#include <stdlib.h>

#include "attention_tile.h"
#include "kernel_table.h" /* ds_attention16_workspace's layout */
#include "kernels.h"

/* Query rows per chunk: the k-range of the dk and dv tiles, long enough that loading and
 * storing their accumulators does not dominate. A multiple of MR. */
#define CHUNK 64

static size_t fused_forward_workspace(att_dims d) {
    return (size_t)d.hs * d.Tp + 2 * (size_t)d.T * d.hsp + (size_t)MR * d.Tp + (size_t)d.Tp;
}

DS_SIMD static void fused_forward_head(float *out, float *lse, const float *qkv, int b, int h,
                                       att_dims d, const ds_km_drop *dr, float *ws) {
    int T = d.T, C = d.C, hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    float *Kt = ws, *V = Kt + (size_t)hs * Tp, *qs = V + (size_t)T * hsp;
    float *S = qs + (size_t)T * hsp; /* scores, then probabilities, of MR rows */
    float *m = S + (size_t)MR * Tp;  /* a mask row */
    pack_transposed(Kt, base + C, d.C3, T, hs, Tp);
    pack_rows(V, base + 2 * C, d.C3, T, hs, hsp, 1.0f);
    pack_rows(qs, base, d.C3, T, hs, hsp, d.scale);
    float *L = lse + ((size_t)b * d.NH + h) * T;
    for (int t0 = 0; t0 < T; t0 += MR) {
        int mr = T - t0 < MR ? T - t0 : MR;
        amat Q = {qs + (size_t)t0 * hsp, (size_t)hsp, 1};
        krange all = {0, 0, hs, 0};
        for (int u0 = 0; u0 < t0 + mr; u0 += NR) tile(S + u0, Tp, mr, NR, 0, Q, Kt + u0, Tp, all);
        softmax_rows(S, L + t0, S, t0, mr, Tp, Tp);
        for (int r = 0; r < mr && dr->p > 0.0f; r++) { /* the dropped rows meet V */
            mask_row(m, dr, b, h, t0 + r, t0 + r + 1, d);
            for (int u = 0; u <= t0 + r; u++) S[(size_t)r * Tp + u] *= m[u];
        }
        amat P = {S, (size_t)Tp, 1};
        float *o = out + ((size_t)b * T + t0) * C + (size_t)h * hs;
        krange causal = {0, 0, t0 + 1, 1};
        for (int i0 = 0; i0 < hs; i0 += NR)
            tile(o + i0, C, mr, hs - i0 < NR ? hs - i0 : NR, 0, P, V + i0, hsp, causal);
    }
}

void ds_attention_forward_fused(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH, float p, ds_rng_key key) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = att_dims_of(B, T, C, NH);
    ds_km_drop dr = att_drop_of(p, key);
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel if (work > 4 * DS_PAR_MIN)
    {
        float *ws = att_workspace(fused_forward_workspace(d));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++) fused_forward_head(out, lse, qkv, b, h, d, &dr, ws);
        free(ws);
    }
}

static size_t fused_backward_workspace(att_dims d) {
    return 2 * (size_t)d.hs * d.Tp + 4 * (size_t)d.T * d.hsp + 2 * (size_t)CHUNK * d.Tp +
           (size_t)d.Tp;
}

/* The packed operands of one head and the chunk's buffers (rows of stride Tp). */
typedef struct fused_head {
    float *Kt, *Vt;        /* [hs][Tp] */
    float *qs, *Q, *K, *dY; /* [T][hsp]: scaled q (the scores), q, k, dy */
    float *P, *dS;         /* [CHUNK][Tp] */
    float *m;              /* [Tp]: a mask row */
    const float *L;        /* the head's lse */
    float *dq;             /* dqkv at the head's first row; dk at +C, dv at +2C */
    const ds_km_drop *dr;  /* the dropout; p = 0: none */
    int b, h;
} fused_head;

/* Rows t0..t0+mr of the chunk starting at c0: P (times the mask with dropout: the
 * probabilities that met dy), dS and dq = dS.K (acc: +=), whole in one call since row t's
 * keys are all in it. */
HEAD_INLINE void fused_backward_rows(const fused_head *f, int acc, int t0, int mr, int c0,
                                     att_dims d) {
    int hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    float *P = f->P + (size_t)(t0 - c0) * Tp, *G = f->dS + (size_t)(t0 - c0) * Tp;
    amat Q = {f->qs + (size_t)t0 * hsp, (size_t)hsp, 1};
    amat Y = {f->dY + (size_t)t0 * hsp, (size_t)hsp, 1};
    krange all = {0, 0, hs, 0};
    for (int u0 = 0; u0 < t0 + mr; u0 += NR) {
        tile(P + u0, Tp, mr, NR, 0, Q, f->Kt + u0, Tp, all);
        tile(G + u0, Tp, mr, NR, 0, Y, f->Vt + u0, Tp, all);
    }
    for (int r = 0; r < mr; r++) {
        float *p = P + (size_t)r * Tp, *g = G + (size_t)r * Tp, l = f->L[t0 + r];
        int n = t0 + r + 1;
        for (int u = 0; u < n; u++) p[u] = ds_km_expf(p[u] - l);
        if (f->dr->p > 0.0f) { /* dy.V is the gradient of the dropped row: times the mask */
            mask_row(f->m, f->dr, f->b, f->h, t0 + r, n, d);
            for (int u = 0; u < n; u++) g[u] *= f->m[u];
        }
        float dot = 0.0f;
        for (int u = 0; u < n; u++) dot += p[u] * g[u];
        for (int u = 0; u < n; u++) g[u] = p[u] * (g[u] - dot) * d.scale; /* now dS */
        if (f->dr->p > 0.0f)
            for (int u = 0; u < n; u++) p[u] *= f->m[u];
    }
    amat dS = {G, (size_t)Tp, 1};
    krange causal = {0, 0, t0 + 1, 1};
    for (int i0 = 0; i0 < hs; i0 += NR)
        tile(f->dq + t0 * d.C3 + i0, d.C3, mr, hs - i0 < NR ? hs - i0 : NR, acc, dS, f->K + i0, hsp,
             causal);
}

/* dk[u] += sum dS[t][u] q[t], dv[u] += sum P[t][u] dy[t] over the chunk's rows
 * t in [c0, c1), t >= u; the first chunk to reach a block of keys (the one holding it)
 * writes it unless acc. */
HEAD_INLINE void fused_backward_keys(const fused_head *f, int acc, int c0, int c1, att_dims d) {
    int hs = d.hs, Tp = d.Tp, hsp = d.hsp, C = d.C;
    for (int u0 = 0; u0 < c1; u0 += MR) {
        int mr = c1 - u0 < MR ? c1 - u0 : MR;
        /* u0 and c0 are multiples of MR: a block is wholly before the chunk or in it */
        krange kr = u0 >= c0 ? (krange){u0 - c0, 1, c1 - c0, 0} : (krange){0, 0, c1 - c0, 0};
        amat dSt = {f->dS + u0, 1, (size_t)Tp}, Pt = {f->P + u0, 1, (size_t)Tp};
        float *dk = f->dq + u0 * d.C3 + C, *dv = dk + C;
        int add = acc || u0 < c0;
        for (int i0 = 0; i0 < hs; i0 += NR) {
            int nc = hs - i0 < NR ? hs - i0 : NR;
            tile(dk + i0, d.C3, mr, nc, add, dSt, f->Q + (size_t)c0 * hsp + i0, hsp, kr);
            tile(dv + i0, d.C3, mr, nc, add, Pt, f->dY + (size_t)c0 * hsp + i0, hsp, kr);
        }
    }
}

DS_SIMD static void fused_backward_head(float *dqkv, int acc, const float *dout, const float *qkv,
                                        const float *lse, int b, int h, att_dims d,
                                        const ds_km_drop *dr, float *ws) {
    int T = d.T, C = d.C, hs = d.hs, Tp = d.Tp, hsp = d.hsp;
    const float *base = qkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    fused_head f;
    f.Kt = ws, f.Vt = f.Kt + (size_t)hs * Tp;
    f.qs = f.Vt + (size_t)hs * Tp, f.Q = f.qs + (size_t)T * hsp;
    f.K = f.Q + (size_t)T * hsp, f.dY = f.K + (size_t)T * hsp;
    f.P = f.dY + (size_t)T * hsp, f.dS = f.P + (size_t)CHUNK * Tp;
    f.m = f.dS + (size_t)CHUNK * Tp;
    f.L = lse + ((size_t)b * d.NH + h) * T;
    f.dr = dr, f.b = b, f.h = h;
    f.dq = dqkv + (size_t)b * T * d.C3 + (size_t)h * hs;
    pack_transposed(f.Kt, base + C, d.C3, T, hs, Tp);
    pack_transposed(f.Vt, base + 2 * C, d.C3, T, hs, Tp);
    pack_rows(f.qs, base, d.C3, T, hs, hsp, d.scale);
    pack_rows(f.Q, base, d.C3, T, hs, hsp, 1.0f);
    pack_rows(f.K, base + C, d.C3, T, hs, hsp, 1.0f);
    pack_rows(f.dY, dout + (size_t)b * T * C + (size_t)h * hs, (size_t)C, T, hs, hsp, 1.0f);
    for (int c0 = 0; c0 < T; c0 += CHUNK) {
        int c1 = T - c0 < CHUNK ? T : c0 + CHUNK;
        for (int t0 = c0; t0 < c1; t0 += MR)
            fused_backward_rows(&f, acc, t0, c1 - t0 < MR ? c1 - t0 : MR, c0, d);
        fused_backward_keys(&f, acc, c0, c1, d);
    }
}

void ds_attention_backward_fused(float *dqkv, int acc, const float *dout, const float *qkv,
                                 const float *lse, int B, int T, int C, int NH, float p,
                                 ds_rng_key key) {
    if (B <= 0 || T <= 0 || NH <= 0 || C < NH) return;
    att_dims d = att_dims_of(B, T, C, NH);
    ds_km_drop dr = att_drop_of(p, key);
    size_t work = (size_t)B * NH * T * T * d.hs;
#pragma omp parallel if (work > 2 * DS_PAR_MIN)
    {
        float *ws = att_workspace(fused_backward_workspace(d));
#pragma omp for collapse(2) schedule(dynamic)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                fused_backward_head(dqkv, acc, dout, qkv, lse, b, h, d, &dr, ws);
        free(ws);
    }
}

/* ---- 16-bit activations (kernel_table.h's attention16 pair) ----------------------------
 * The pair above on fp32 copies in ws (ds_attention16_workspace's layout for
 * DS_ATTN16_F32): qkv widened, the output computed there and rounded once. Backward
 * recomputes from qkv and lse, so only qkv is widened; a 16-bit dqkv is computed there in
 * fp32 and rounded once. */

void ds_attention16_forward_fused(ds_half h, void *out, float *lse, const void *qkv, int B,
                                  int T, int C, int NH, float p, ds_rng_key key, int in16,
                                  int out16, void *ws) {
    size_t N = (size_t)B * (size_t)T, nqkv = N * 3 * (size_t)C;
    const float *x = qkv;
    float *y = out16 ? (float *)((char *)ws + ds_ws_part(in16 ? 4 * nqkv : 0)) : out;
    if (in16) {
        ds_half_to_f32(h, ws, qkv, nqkv);
        x = ws;
    }
    ds_attention_forward_fused(y, lse, x, B, T, C, NH, p, key);
    if (out16) ds_half_from_f32(h, out, y, N * (size_t)C);
}

void ds_attention16_backward_fused(ds_half h, void *dqkv, int acc, const float *dout,
                                   const void *qkv, const float *lse, int B, int T, int C, int NH,
                                   float p, ds_rng_key key, int in16, int din16, void *ws) {
    size_t nqkv = (size_t)B * (size_t)T * 3 * (size_t)C;
    const float *x = qkv;
    /* dk and dv are summed over chunks of query rows: in fp32, then rounded once */
    float *d = din16 ? (float *)((char *)ws + ds_ws_part(in16 ? 4 * nqkv : 0)) : dqkv;
    if (in16) {
        ds_half_to_f32(h, ws, qkv, nqkv);
        x = ws;
    }
    ds_attention_backward_fused(d, din16 ? 0 : acc, dout, x, lse, B, T, C, NH, p, key);
    if (din16) ds_half_from_f32(h, dqkv, d, nqkv);
}
