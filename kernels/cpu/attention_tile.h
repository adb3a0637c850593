/* The building blocks of the CPU attention kernels (attention.c: the reference, which
 * keeps the [B,NH,T,T] probabilities; attention_fused.c: the fused pair, which keeps one
 * log-sum-exp per row): register tiles over a causal range of k, packing of a head's
 * operands, and the row softmax. attention.c's header comment says how they fit. */
#ifndef DS_CPU_ATTENTION_TILE_H
#define DS_CPU_ATTENTION_TILE_H

#include <math.h>
#include <stdlib.h>

#include "kernels.h" /* ds_rng_key */
#include "simd.h"

/* A register tile: MR rows by NR columns (two AVX-512 vectors), 8 vector accumulators.
 * (GCC feeds B to the multiply-adds from memory, one load per row, so the tile is
 * load-bound; keeping B in registers via vector types spilled the accumulators.) */
#define MR 4
#define NR 32

/* Helpers of the SIMD-cloned per-head functions must be inlined into each clone: one
 * compiled on its own would run the baseline (SSE) code under every clone. */
#if defined(__GNUC__)
#define HEAD_INLINE static inline __attribute__((always_inline))
#else
#define HEAD_INLINE static inline
#endif

typedef struct att_dims {
    int B, T, C, NH, hs;
    int Tp, hsp; /* T and hs rounded up to whole tiles: strides of the packed buffers */
    size_t C3;   /* row stride of qkv */
    float scale;
} att_dims;

static inline att_dims att_dims_of(int B, int T, int C, int NH) {
    int hs = C / NH;
    att_dims d = {B, T, C, NH, hs, (T + NR - 1) / NR * NR, (hs + NR - 1) / NR * NR,
                  3 * (size_t)C, 1.0f / sqrtf((float)hs)};
    return d;
}

/* Operand A of a tile: element (r, k) is p[r*rs + k*ks], so A can be read by rows (ks = 1)
 * or, for dk and dv, down the columns of a [T][T] matrix (rs = 1, ks = T). */
typedef struct amat {
    const float *p;
    size_t rs, ks;
} amat;

/* Row r of a tile sums over k in [lo + r*dlo, hi + r*dhi), ascending. dlo, dhi are 0 or
 * 1: a causal range ends one step later on each next row (outputs, dq) or starts one step
 * later (dk, dv). */
typedef struct krange {
    int lo, dlo, hi, dhi;
} krange;

/* c[r*ldc + j] (+)= sum_k A(r, k) * b[k*ldb + j] for rows r < mr, columns j < nc. b must
 * have NR readable columns. Rows mr..MR-1 repeat row mr-1 (always in bounds) and are
 * dropped, so a short last block needs no padding of A or C. */
HEAD_INLINE void tile(float *c, size_t ldc, int mr, int nc, int accumulate, amat A,
                      const float *b, size_t ldb, krange kr) {
    float acc[MR][NR];
    const float *a[MR];
    for (int r = 0; r < MR; r++) {
        int rr = r < mr ? r : mr - 1;
        a[r] = A.p + rr * A.rs;
        for (int j = 0; j < NR; j++) acc[r][j] = accumulate && j < nc ? c[rr * ldc + j] : 0.0f;
    }
    int all_lo = kr.lo + (mr - 1) * kr.dlo, end = kr.hi + (mr - 1) * kr.dhi;
    for (int k = kr.lo; k < all_lo; k++) /* causal start: only the rows already in range */
        for (int r = 0; r < mr; r++) {
            if (k < kr.lo + r * kr.dlo) continue;
            float ar = a[r][k * A.ks];
            const float *bk = b + k * ldb;
            for (int j = 0; j < NR; j++) acc[r][j] += ar * bk[j];
        }
    for (int k = all_lo; k < kr.hi; k++) { /* every row in range */
        const float *bk = b + k * ldb;
        for (int r = 0; r < MR; r++) {
            float ar = a[r][k * A.ks];
            for (int j = 0; j < NR; j++) acc[r][j] += ar * bk[j];
        }
    }
    for (int k = kr.hi > all_lo ? kr.hi : all_lo; k < end; k++) /* causal end */
        for (int r = 0; r < mr; r++) {
            if (k >= kr.hi + r * kr.dhi) continue;
            float ar = a[r][k * A.ks];
            const float *bk = b + k * ldb;
            for (int j = 0; j < NR; j++) acc[r][j] += ar * bk[j];
        }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nc; j++) c[r * ldc + j] = acc[r][j];
}

/* dst[i*ld + t] = src[t*stride + i], zero for t >= T: keys or values as [hs][ld]. Blocks
 * of 16 positions make each store a whole vector. */
HEAD_INLINE void pack_transposed(float *dst, const float *src, size_t stride, int T, int hs,
                                 int ld) {
    int t0 = 0;
    for (; t0 + 16 <= T; t0 += 16)
        for (int i = 0; i < hs; i++)
            for (int j = 0; j < 16; j++) dst[(size_t)i * ld + t0 + j] = src[(t0 + j) * stride + i];
    for (int i = 0; i < hs; i++)
        for (int t = t0; t < ld; t++) dst[(size_t)i * ld + t] = t < T ? src[t * stride + i] : 0.0f;
}

/* dst[t*ld + i] = src[t*stride + i] * scale, zero for i >= hs */
HEAD_INLINE void pack_rows(float *restrict dst, const float *restrict src, size_t stride, int T,
                           int hs, int ld, float scale) {
    for (int t = 0; t < T; t++)
        for (int i = 0; i < ld; i++)
            dst[(size_t)t * ld + i] = i < hs ? src[t * stride + i] * scale : 0.0f;
}

/* max of s[0..n): lanes keep it vectorisable; a max is exact in any order */
HEAD_INLINE float row_max(const float *s, int n) {
    float acc[DS_LANES];
    for (int j = 0; j < DS_LANES; j++) acc[j] = -INFINITY;
    int u = 0;
    for (; u + DS_LANES <= n; u += DS_LANES)
        for (int j = 0; j < DS_LANES; j++) acc[j] = s[u + j] > acc[j] ? s[u + j] : acc[j];
    float m = -INFINITY;
    for (int j = 0; j < DS_LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (; u < n; u++) m = s[u] > m ? s[u] : m;
    return m;
}

/* s[r] = sum of x[r*ldx + u] over u <= t0 + r, for rows r < mr, each in order u = 0, 1, ...
 * The rows' sums interleave, so an add need not wait for the one before it. */
HEAD_INLINE void causal_sums(float s[MR], const float *x, size_t ldx, int t0, int mr) {
    for (int r = 0; r < MR; r++) s[r] = 0.0f;
    for (int u = 0; u <= t0; u++)
        for (int r = 0; r < MR; r++)
            if (r < mr) s[r] += x[r * ldx + u];
    for (int r = 1; r < mr; r++)
        for (int u = t0 + 1; u <= t0 + r; u++) s[r] += x[r * ldx + u];
}

/* rows t0.. of A (stride T) = softmax of the scores S (stride Tp) over u <= t, zeros
 * after; A may be S itself (T = Tp). lse (NULL: not wanted) gets each row's log of its sum
 * of exp(score), what the fused kernels keep instead of A. The exponentials are a loop of
 * their own so it vectorises. */
HEAD_INLINE void softmax_rows(float *A, float *lse, const float *S, int t0, int mr, int T,
                              int Tp) {
    float maxv[MR];
    for (int r = 0; r < mr; r++) {
        float *a = A + (size_t)r * T;
        const float *s = S + (size_t)r * Tp;
        maxv[r] = row_max(s, t0 + r + 1);
        for (int u = 0; u <= t0 + r; u++) a[u] = ds_km_expf(s[u] - maxv[r]);
    }
    float sum[MR];
    causal_sums(sum, A, (size_t)T, t0, mr);
    for (int r = 0; r < mr; r++) {
        float *a = A + (size_t)r * T, inv = 1.0f / sum[r];
        for (int u = 0; u <= t0 + r; u++) a[u] *= inv;
        for (int u = t0 + r + 1; u < T; u++) a[u] = 0.0f;
        if (lse) lse[r] = maxv[r] + logf(sum[r]);
    }
}

/* Dropout on the probabilities under key (kernel_math.h's form); p = 0: none. */
static inline ds_km_drop att_drop_of(float p, ds_rng_key key) {
    return ds_km_drop_of(p, key.seed, key.step, key.layer, key.micro, key.offset);
}

/* m[u] = keep scale or 0 for keys u < n of query row i of head (b, h): the row of the
 * dropout mask (kernel_math.h's mapping); d->p must be > 0 */
HEAD_INLINE void mask_row(float *m, const ds_km_drop *dr, int b, int h, int i, int n,
                          att_dims d) {
    ds_km_drop_row(m, *dr, ds_km_attn_elem(b, h, i, 0, d.NH, d.T), n);
}

static inline float *att_workspace(size_t n) {
    size_t bytes = ((n ? n : 1) * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    /* up to a few MB per thread (T*T floats in the reference's backward with dropout at
     * T = 1024): failure here means the process is already lost */
    if (!p) abort();
    return p;
}

#endif
