/* Per-element math shared by the CPU and CUDA kernels: one definition of each formula, so
 * what the CPU tests cover is the arithmetic the GPU runs. Plain C17; under nvcc every
 * helper is also a device function (DS_HD). Integer paths (Philox, dropout threshold,
 * bf16/fp16 rounding) give the same bits on both; float paths can differ in the last
 * bits only where a compiler contracts a*b+c into an FMA (gcc's -ffp-contract=fast on
 * AVX2 clones, nvcc's --fmad=true). */
#ifndef DS_KERNEL_MATH_H
#define DS_KERNEL_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define DS_HD __host__ __device__
#else
#define DS_HD
#endif

/* ---- bit casts ------------------------------------------------------------------- */
static inline DS_HD uint32_t ds_km_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

static inline DS_HD float ds_km_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* ---- exp ------------------------------------------------------------------------- */
/* exp(x) with ~2 ulp error for x in [-87.3, 88.7]; 0 below, clamped above. Range
 * reduction x = n*ln2 + r and Cephes' minimax polynomial for exp(r) on |r| <= ln2/2.
 * Branch-free (vectorises on the CPU, no divergence on the GPU). */
static inline DS_HD float ds_km_expf(float x) {
    float xc = x > 88.3762626647949f ? 88.3762626647949f : x;
    xc = xc < -87.33654475f ? -87.33654475f : xc;
    float t = xc * 1.44269504088896341f + 12582912.0f; /* round(x/ln2) via 1.5*2^23 */
    float n = t - 12582912.0f;
    float r = xc - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    float y = p * ds_km_bits_f32((uint32_t)((int32_t)n + 127) << 23);
    return x < -87.33654475f ? 0.0f : y;
}

/* ---- GELU (GPT-2's tanh approximation, as x * sigmoid(2u)) ------------------------- */
#define DS_KM_GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define DS_KM_GELU_CUBE 0.044715f

static inline DS_HD float ds_km_gelu_fwd(float x) {
    float u = DS_KM_GELU_SCALE * (x + DS_KM_GELU_CUBE * x * x * x);
    return x / (1.0f + ds_km_expf(-2.0f * u));
}

/* d gelu / dx */
static inline DS_HD float ds_km_gelu_grad(float x) {
    float u = DS_KM_GELU_SCALE * (x + DS_KM_GELU_CUBE * x * x * x);
    float du = DS_KM_GELU_SCALE * (1.0f + 3.0f * DS_KM_GELU_CUBE * x * x);
    float s = 1.0f / (1.0f + ds_km_expf(-2.0f * u));
    return s + x * s * (1.0f - s) * 2.0f * du;
}

/* ---- Philox-4x32-10 and the dropout mask --------------------------------------------- */
#define DS_KM_PHILOX_M0 0xD2511F53u
#define DS_KM_PHILOX_M1 0xCD9E8D57u
#define DS_KM_PHILOX_W0 0x9E3779B9u
#define DS_KM_PHILOX_W1 0xBB67AE85u

static inline DS_HD void ds_km_philox_round(uint32_t c[4], const uint32_t k[2]) {
    uint64_t p0 = (uint64_t)DS_KM_PHILOX_M0 * c[0];
    uint64_t p1 = (uint64_t)DS_KM_PHILOX_M1 * c[2];
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c[0] = hi1 ^ c[1] ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k[1];
    c[3] = lo0;
}

/* c: counter in, the four random words out; key is not modified */
static inline DS_HD void ds_km_philox4x32_10(uint32_t c[4], const uint32_t key[2]) {
    uint32_t k[2] = {key[0], key[1]};
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k[0] += DS_KM_PHILOX_W0;
            k[1] += DS_KM_PHILOX_W1;
        }
        ds_km_philox_round(c, k);
    }
}

/* Dropout keeps element i iff its 32-bit draw is >= p * 2^32. Element i draws word g%4 of
 * block g/4, g = key offset + i: the four words of block blk are ds_km_dropout_draws'
 * Philox output for counter {blk, step, layer, micro} under key {seed lo, seed hi}. */
static inline DS_HD void ds_km_dropout_draws(uint32_t r[4], uint64_t blk, const uint32_t key[2],
                                             uint32_t step, uint32_t layer, uint32_t micro) {
    r[0] = (uint32_t)blk;
    r[1] = step;
    r[2] = layer;
    r[3] = micro;
    ds_km_philox4x32_10(r, key);
}

static inline DS_HD uint32_t ds_km_drop_threshold(float p) {
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

static inline DS_HD float ds_km_keep_scale(float p) {
    return p >= 1.0f ? 0.0f : 1.0f / (1.0f - p);
}

static inline DS_HD float ds_km_dropout1(float x, uint32_t draw, float p, uint32_t thresh,
                                         float keep_scale) {
    return (p < 1.0f && draw >= thresh) ? x * keep_scale : 0.0f;
}

/* ---- attention dropout: which draw masks which probability ------------------------- */
/* Element (b, h, i, j) of the [B,NH,T,T] attention probabilities (query row i, key j) is
 * masked by the draw of index ((b*NH + h)*T + i)*T + j of a Dropout's stream under the
 * same key (plus the key's offset): what ds_dropout_forward would draw for the whole
 * tensor. One mapping for every attention kernel: the reference ones, which hold the
 * tensor, and the fused ones, which regenerate a tile's mask in forward and again in
 * backward (the draw is a pure function of key and index). */
typedef struct ds_km_drop {
    float p, keep_scale; /* p = 0: no dropout */
    uint32_t thresh, key[2], step, layer, micro;
    uint64_t offset;
} ds_km_drop;

static inline DS_HD ds_km_drop ds_km_drop_of(float p, uint64_t seed, uint32_t step,
                                             uint32_t layer, uint32_t micro, uint64_t offset) {
    ds_km_drop d = {0.0f, 0.0f, 0u, {0u, 0u}, 0u, 0u, 0u, 0u};
    if (!(p > 0.0f)) return d;
    d.p = p;
    d.keep_scale = ds_km_keep_scale(p);
    d.thresh = ds_km_drop_threshold(p);
    d.key[0] = (uint32_t)seed, d.key[1] = (uint32_t)(seed >> 32);
    d.step = step, d.layer = layer, d.micro = micro;
    d.offset = offset;
    return d;
}

static inline DS_HD uint64_t ds_km_attn_elem(int b, int h, int i, int j, int NH, int T) {
    return (((uint64_t)b * (uint64_t)NH + (uint64_t)h) * (uint64_t)T + (uint64_t)i) *
               (uint64_t)T + (uint64_t)j;
}

/* The Philox block of the last index drawn: a walk along a row of the probabilities
 * costs one Philox call per 4 elements. blk = UINT64_MAX: none yet. */
typedef struct ds_km_drop_walk {
    uint64_t blk;
    uint32_t r[4];
} ds_km_drop_walk;

/* keep scale or 0 for element e (ds_km_attn_elem's index). d by value: a GPU kernel's
 * parameter whose address is taken is copied to local memory. */
static inline DS_HD float ds_km_drop_next(const ds_km_drop d, ds_km_drop_walk *w, uint64_t e) {
    uint64_t g = d.offset + e;
    if (g / 4 != w->blk) {
        w->blk = g / 4;
        ds_km_dropout_draws(w->r, w->blk, d.key, d.step, d.layer, d.micro);
    }
    /* selects, not r[g % 4]: a run-time index would put r in a GPU thread's local memory */
    uint32_t lo = (g & 1) ? w->r[1] : w->r[0], hi = (g & 1) ? w->r[3] : w->r[2];
    return ds_km_dropout1(1.0f, (g & 2) ? hi : lo, d.p, d.thresh, d.keep_scale);
}

static inline DS_HD float ds_km_drop_at(const ds_km_drop d, uint64_t e) {
    ds_km_drop_walk w = {UINT64_MAX, {0u, 0u, 0u, 0u}};
    return ds_km_drop_next(d, &w, e);
}

/* m[u] = ds_km_drop_at(d, e + u) for u < n, a run at a time: the draws of a run's Philox
 * blocks first, in a loop of independent blocks (the CPU vectorises it), then the keep
 * test per element. */
#define DS_KM_DROP_RUN 64
static inline DS_HD void ds_km_drop_row(float *m, const ds_km_drop d, uint64_t e, int n) {
    for (int u0 = 0; u0 < n; u0 += DS_KM_DROP_RUN) {
        int c = n - u0 < DS_KM_DROP_RUN ? n - u0 : DS_KM_DROP_RUN;
        uint64_t g = d.offset + e + (uint64_t)u0, blk0 = g / 4;
        int skip = (int)(g % 4), nb = (skip + c + 3) / 4;
        uint32_t w[DS_KM_DROP_RUN + 8];
        for (int k = 0; k < nb; k++)
            ds_km_dropout_draws(w + 4 * k, blk0 + (uint64_t)k, d.key, d.step, d.layer, d.micro);
        for (int u = 0; u < c; u++)
            m[u0 + u] = ds_km_dropout1(1.0f, w[skip + u], d.p, d.thresh, d.keep_scale);
    }
}

/* ---- bf16 / fp16 rounding (round to nearest even; NaN stays a quiet NaN) ------------ */
static inline DS_HD uint16_t ds_km_f32_to_bf16(float f) {
    uint32_t u = ds_km_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline DS_HD float ds_km_bf16_to_f32(uint16_t h) {
    return ds_km_bits_f32((uint32_t)h << 16);
}

static inline DS_HD uint16_t ds_km_f32_to_f16(float f) {
    uint32_t u = ds_km_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                    /* fp16 denormal or zero */
        if (a < 0x33000000u) return sign;                     /* < 2^-25: rounds to zero */
        uint32_t e = a >> 23;
        uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* m * 2^(e-150) / 2^-24 = m >> (126 - e) */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u))) q++;
        return (uint16_t)(sign | q);
    }
    /* normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits */
    uint32_t r = a - 0x38000000u;
    r += 0xFFFu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

static inline DS_HD float ds_km_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1F) return ds_km_bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return ds_km_bits_f32(sign);
        float f = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        return sign ? -f : f;
    }
    return ds_km_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- optimizers ------------------------------------------------------------------ */
/* AdamW with the bias corrections folded into step = lr / (1 - beta1^t) and
 * rbc2 = 1 / sqrt(1 - beta2^t), both computed once per call in double. */
typedef struct ds_km_adamw {
    float gscale, beta1, beta2, one_m_b1, one_m_b2, step, rbc2, eps, decay;
} ds_km_adamw;

static inline ds_km_adamw ds_km_adamw_consts(float lr, float beta1, float beta2, float eps,
                                             float weight_decay, float grad_scale, int t) {
    ds_km_adamw k;
    k.gscale = grad_scale;
    k.beta1 = beta1;
    k.beta2 = beta2;
    k.one_m_b1 = 1.0f - beta1;
    k.one_m_b2 = 1.0f - beta2;
    k.step = (float)(lr / (1.0 - pow(beta1, t)));
    k.rbc2 = (float)(1.0 / sqrt(1.0 - pow(beta2, t)));
    k.eps = eps;
    k.decay = 1.0f - lr * weight_decay;
    return k;
}

/* one element; sqrt is correctly rounded on both sides */
#ifdef __CUDA_ARCH__
#define DS_KM_SQRTF(x) __fsqrt_rn(x)
#else
#define DS_KM_SQRTF(x) __builtin_sqrtf(x)
#endif
static inline DS_HD void ds_km_adamw1(float *param, float grad, float *m, float *v,
                                      const ds_km_adamw *k) {
    float g = grad * k->gscale;
    float mi = k->beta1 * *m + k->one_m_b1 * g;
    float vi = k->beta2 * *v + k->one_m_b2 * g * g;
    *m = mi;
    *v = vi;
    *param = *param * k->decay - k->step * mi / (DS_KM_SQRTF(vi) * k->rbc2 + k->eps);
}

/* SGD with momentum, PyTorch's form (buf = mom*buf + g + wd*p; p -= lr*buf), in the CPU
 * kernel's order of operations; buf may be NULL when momentum is 0 */
static inline DS_HD void ds_km_sgd1(float *param, float grad, float *buf, float lr,
                                    float momentum, float weight_decay) {
    if (momentum != 0.0f) {
        float g = momentum * *buf + grad + weight_decay * *param;
        *buf = g;
        *param -= lr * g;
    } else {
        *param -= lr * (grad + weight_decay * *param);
    }
}

/* ---- layernorm pieces ---------------------------------------------------------------- */
/* y = (x - mean) * rstd * w + b; w, b optional (1, 0) */
static inline DS_HD float ds_km_layernorm1(float x, float mean, float rstd, float w, float b) {
    return (x - mean) * rstd * w + b;
}

/* dx for one element, given the row's mean(dnorm) and mean(dnorm * xhat), dnorm = w*dy */
static inline DS_HD float ds_km_layernorm_dx1(float x, float dy, float w, float mean,
                                              float rstd, float dnorm_mean,
                                              float dnorm_norm_mean) {
    float xn = (x - mean) * rstd;
    return (w * dy - dnorm_mean - xn * dnorm_norm_mean) * rstd;
}

#endif
