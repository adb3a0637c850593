// Causal attention without the [T, T] probabilities (FlashAttention's scheme, in fp32):
// keys and values go through shared memory in tiles, each query row keeps a running
// maximum, a running sum and an unnormalised output (the online softmax, fp32
// statistics), and the forward saves only lse[B, NH, T] = log sum_j exp(s_ij). Backward
// recomputes the probabilities from lse: one kernel per query row for dq, one per key
// row for dk and dv, so every gradient element has one owner thread and a fixed order
// (no atomics: the same call gives the same bits). Attention memory grows with T, not
// T^2. kernels.h's ds_attention_forward / _backward are the reference.
//
// qkv and out may be 16-bit (a 16-bit stage's activations): widened as they are loaded
// into shared memory and registers, the output rounded once as it is stored; the
// arithmetic, the statistics and lse stay fp32. qkv's element type is a template argument
// (ds_cu_e32 / ds_cu_e16: its loads are in the inner loops, where a runtime branch spilled
// registers), out goes through ds_cu_act (read or written once per element).
//
// A thread owns one row and holds it in registers, so the register size is a template
// argument HS (16, 32, 64 or 128): a head of size hs <= HS runs in the smallest that holds
// it, the elements d >= hs zero (they add exact zeros); heads above 128 are refused.
//
// Dropout on the probabilities (p > 0, GPT-2's attn_pdrop): element (i, j) is kept or
// dropped by the draw kernel_math.h maps it to (ds_km_attn_elem, the CPU kernels' and the
// reference's mask), drawn where the tile meets it: forward along its query row (one
// Philox call per 4 keys), the dq kernel the same row again, the dk/dv kernel per element
// down its key's column. The statistics (m, l, lse) are the undropped ones; the dropped
// probabilities P_ij * M_ij / (1 - p) meet V in forward and dO in dv, and dP_ij =
// (dO_i . v_j) * M_ij / (1 - p) in dS_ij = P_ij (dP_ij - D_i), where D_i = dO_i . O_i of
// the dropped output is still sum_j P_ij dP_ij. Dropout is a template argument (DROP):
// p = 0 runs the kernels compiled without it, the code, registers and bits of before.
#include <math.h>

#include "cuda_common.cuh"
#include "half_math.cuh"

#define FA_ROWS 64 // query (forward, dq) or key (dk, dv) rows per block: one per thread
#define FA_TILE 32 // the other side's rows per tile in shared memory

// Scores in log2 units: exp2f is one instruction; lse is stored in natural units.
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

template <int HS, typename E, bool DROP>
__global__ static void __launch_bounds__(FA_ROWS)
    flash_fwd_k(ds_cu_act out, float *lse, const void *qkv, int T, int C, int NH, int hs,
                float scale, ds_km_drop dr) {
    __shared__ float ks[FA_TILE][HS], vs[FA_TILE][HS];
    int h = blockIdx.y, b = blockIdx.z;
    int i = blockIdx.x * FA_ROWS + threadIdx.x;
    int last = min(T - 1, (int)(blockIdx.x * FA_ROWS + FA_ROWS - 1)); // the block's last row
    size_t row3 = (size_t)3 * C;
    size_t base = (size_t)b * T * row3 + (size_t)h * hs;
    float q[HS], o[HS];
    float m = -INFINITY, l = 0.0f;
#pragma unroll // q and o must stay registers: a loop left rolled indexes them at run time
    for (int d = 0; d < HS; d++)
        q[d] = i < T && d < hs ? E::load(qkv, base + (size_t)i * row3 + d) * scale * FA_LOG2E : 0.0f;
    for (int d = 0; d < HS; d++) o[d] = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += FA_TILE) {
        __syncthreads(); // the previous tile is no longer read
        for (int e = threadIdx.x; e < FA_TILE * HS; e += FA_ROWS) {
            int jj = e / HS, d = e % HS, j = j0 + jj;
            ks[jj][d] = j < T && d < hs ? E::load(qkv, base + (size_t)j * row3 + C + d) : 0.0f;
            vs[jj][d] = j < T && d < hs ? E::load(qkv, base + (size_t)j * row3 + 2 * C + d) : 0.0f;
        }
        __syncthreads();
        if (i < T && j0 <= i) {
            int n = min(FA_TILE, i - j0 + 1); // keys j <= i only
            float s[FA_TILE];
            float tmax = m;
            for (int jj = 0; jj < FA_TILE; jj++) {
                if (jj >= n) break;
                float acc = 0.0f;
                for (int d = 0; d < HS; d++) acc += q[d] * ks[jj][d];
                s[jj] = acc;
                tmax = fmaxf(tmax, acc);
            }
            float corr = exp2f(m - tmax); // m = -inf the first time: corr = 0
            l *= corr;
            for (int d = 0; d < HS; d++) o[d] *= corr;
            ds_km_drop_walk w = {UINT64_MAX, {0, 0, 0, 0}};
            uint64_t e0 = ds_km_attn_elem(b, h, i, j0, NH, T);
            for (int jj = 0; jj < FA_TILE; jj++) {
                if (jj >= n) break;
                float p = exp2f(s[jj] - tmax);
                l += p; // the undropped sum
                float pv = p; // what meets v: dropped and scaled with dropout
                if (DROP) pv *= ds_km_drop_next(dr, &w, e0 + (uint64_t)jj);
                for (int d = 0; d < HS; d++) o[d] += pv * vs[jj][d];
            }
            m = tmax;
        }
    }
    if (i >= T) return;
    float inv = 1.0f / l; // l >= 1: the row's maximum contributes exp2(0)
    size_t dst = ((size_t)b * T + i) * C + (size_t)h * hs;
#pragma unroll
    for (int d = 0; d < HS; d++)
        if (d < hs) out.store(dst + d, o[d] * inv);
    lse[((size_t)b * NH + h) * T + i] = (m + log2f(l)) * FA_LN2;
}

// delta[b,h,i] = sum_d dout * out over the head: the softmax backward's row term.
__global__ static void flash_delta_k(float *delta, const float *dout, ds_cu_act out, int B,
                                     int T, int C, int NH, int hs) {
    size_t n = (size_t)B * NH * T;
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < n;
         r += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / T / NH);
        size_t at = ((size_t)b * T + i) * C + (size_t)h * hs;
        float acc = 0.0f;
        for (int d = 0; d < hs; d++) acc += dout[at + d] * out.load(at + d);
        delta[r] = acc;
    }
}

// dq for one query row per thread: over keys j <= i in order.
template <int HS, typename E, bool DROP>
__global__ static void __launch_bounds__(FA_ROWS)
    flash_dq_k(ds_cu_act dqkv, int acc, const float *dout, const void *qkv, const float *lse,
               const float *delta, int T, int C, int NH, int hs, float scale, ds_km_drop dr) {
    __shared__ float ks[FA_TILE][HS], vs[FA_TILE][HS];
    int h = blockIdx.y, b = blockIdx.z;
    int i = blockIdx.x * FA_ROWS + threadIdx.x;
    int last = min(T - 1, (int)(blockIdx.x * FA_ROWS + FA_ROWS - 1));
    size_t row3 = (size_t)3 * C;
    size_t base = (size_t)b * T * row3 + (size_t)h * hs;
    float q[HS], dO[HS], dq[HS];
    float L = 0.0f, D = 0.0f;
    const float *go = dout + ((size_t)b * T + (i < T ? i : 0)) * C + (size_t)h * hs;
    for (int d = 0; d < HS; d++) {
        int in = i < T && d < hs;
        q[d] = in ? E::load(qkv, base + (size_t)i * row3 + d) * scale : 0.0f;
        dO[d] = in ? go[d] : 0.0f;
    }
    if (i < T) {
        L = lse[((size_t)b * NH + h) * T + i];
        D = delta[((size_t)b * NH + h) * T + i];
    }
    for (int d = 0; d < HS; d++) dq[d] = 0.0f;
    for (int j0 = 0; j0 <= last; j0 += FA_TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < FA_TILE * HS; e += FA_ROWS) {
            int jj = e / HS, d = e % HS, j = j0 + jj;
            ks[jj][d] = j < T && d < hs ? E::load(qkv, base + (size_t)j * row3 + C + d) : 0.0f;
            vs[jj][d] = j < T && d < hs ? E::load(qkv, base + (size_t)j * row3 + 2 * C + d) : 0.0f;
        }
        __syncthreads();
        if (i >= T || j0 > i) continue;
        int n = min(FA_TILE, i - j0 + 1);
        ds_km_drop_walk w = {UINT64_MAX, {0, 0, 0, 0}};
        uint64_t e0 = ds_km_attn_elem(b, h, i, j0, NH, T);
        for (int jj = 0; jj < n; jj++) {
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) s += q[d] * ks[jj][d], dp += dO[d] * vs[jj][d];
            if (DROP) dp *= ds_km_drop_next(dr, &w, e0 + (uint64_t)jj); // the dropped P's
            float ds = expf(s - L) * (dp - D);
            for (int d = 0; d < HS; d++) dq[d] += ds * ks[jj][d];
        }
    }
    if (i >= T) return;
    size_t dst = ((size_t)b * T + i) * row3 + (size_t)h * hs;
    for (int d = 0; d < HS; d++)
        if (d < hs) ds_cu_grad_act(dqkv, dst + d, dq[d] * scale, acc);
}

// dk and dv for one key row per thread: over queries i >= j in order.
template <int HS, typename E, bool DROP>
__global__ static void __launch_bounds__(FA_ROWS)
    flash_dkv_k(ds_cu_act dqkv, int acc, const float *dout, const void *qkv, const float *lse,
                const float *delta, int T, int C, int NH, int hs, float scale, ds_km_drop dr) {
    __shared__ float qs[FA_TILE][HS], dos[FA_TILE][HS], ls[FA_TILE], ds_[FA_TILE];
    int h = blockIdx.y, b = blockIdx.z;
    int j = blockIdx.x * FA_ROWS + threadIdx.x;
    int first = blockIdx.x * FA_ROWS; // the block's first key: queries before it see none
    size_t row3 = (size_t)3 * C;
    size_t base = (size_t)b * T * row3 + (size_t)h * hs;
    const float *go = dout + (size_t)b * T * C + (size_t)h * hs;
    const float *lrow = lse + ((size_t)b * NH + h) * T, *drow = delta + ((size_t)b * NH + h) * T;
    float k[HS], v[HS], dk[HS], dv[HS];
    for (int d = 0; d < HS; d++) {
        int in = j < T && d < hs;
        k[d] = in ? E::load(qkv, base + (size_t)j * row3 + C + d) * scale : 0.0f;
        v[d] = in ? E::load(qkv, base + (size_t)j * row3 + 2 * C + d) : 0.0f;
    }
    for (int d = 0; d < HS; d++) dk[d] = 0.0f, dv[d] = 0.0f;
    for (int i0 = first - first % FA_TILE; i0 < T; i0 += FA_TILE) {
        __syncthreads();
        for (int e = threadIdx.x; e < FA_TILE * HS; e += FA_ROWS) {
            int ii = e / HS, d = e % HS, i = i0 + ii;
            qs[ii][d] = i < T && d < hs ? E::load(qkv, base + (size_t)i * row3 + d) : 0.0f;
            dos[ii][d] = i < T && d < hs ? go[(size_t)i * C + d] : 0.0f;
        }
        for (int ii = threadIdx.x; ii < FA_TILE; ii += FA_ROWS) {
            int i = i0 + ii;
            ls[ii] = i < T ? lrow[i] : 0.0f;
            ds_[ii] = i < T ? drow[i] : 0.0f;
        }
        __syncthreads();
        if (j >= T) continue;
        for (int ii = 0; ii < FA_TILE; ii++) {
            int i = i0 + ii;
            if (i < j) continue;
            if (i >= T) break;
            float s = 0.0f, dp = 0.0f;
            for (int d = 0; d < HS; d++) s += qs[ii][d] * k[d], dp += dos[ii][d] * v[d];
            float p = expf(s - ls[ii]);
            float pv = p; // what met dO in forward's P V
            if (DROP) { // down the key's column: one draw per element
                float z = ds_km_drop_at(dr, ds_km_attn_elem(b, h, i, j, NH, T));
                pv *= z, dp *= z;
            }
            float dsv = p * (dp - ds_[ii]);
            for (int d = 0; d < HS; d++) dv[d] += pv * dos[ii][d], dk[d] += dsv * qs[ii][d];
        }
    }
    if (j >= T) return;
    size_t dst = ((size_t)b * T + j) * row3 + (size_t)h * hs;
    for (int d = 0; d < HS; d++)
        if (d < hs)
            ds_cu_grad_act(dqkv, dst + C + d, dk[d] * scale, acc),
                ds_cu_grad_act(dqkv, dst + 2 * C + d, dv[d], acc);
}

template <int HS, typename E, bool DROP>
static int flash_forward(ds_cuda_ctx *ctx, ds_cu_act out, float *lse, const void *qkv, int B,
                         int T, int C, int NH, ds_km_drop dr) {
    int hs = C / NH;
    dim3 grid((unsigned)((T + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
    flash_fwd_k<HS, E, DROP><<<grid, FA_ROWS, 0, ctx->stream>>>(out, lse, qkv, T, C, NH, hs,
                                                            1.0f / sqrtf((float)hs), dr);
    DS_CU_LAUNCHED(ctx, "flash attention forward");
    return 0;
}

template <int HS, typename E, bool DROP>
static int flash_backward(ds_cuda_ctx *ctx, ds_cu_act dqkv, int acc, float *delta, const float *dout,
                          const void *qkv, ds_cu_act out, const float *lse, int B, int T, int C,
                          int NH, ds_km_drop dr) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    size_t rows = (size_t)B * NH * T;
    flash_delta_k<<<ds_cu_blocks(rows), DS_CU_THREADS, 0, ctx->stream>>>(delta, dout, out, B, T,
                                                                        C, NH, hs);
    DS_CU_LAUNCHED(ctx, "flash attention backward (delta)");
    dim3 grid((unsigned)((T + FA_ROWS - 1) / FA_ROWS), (unsigned)NH, (unsigned)B);
    flash_dq_k<HS, E, DROP>
        <<<grid, FA_ROWS, 0, ctx->stream>>>(dqkv, acc, dout, qkv, lse, delta, T, C, NH, hs, scale,
                                            dr);
    DS_CU_LAUNCHED(ctx, "flash attention backward (dq)");
    flash_dkv_k<HS, E, DROP>
        <<<grid, FA_ROWS, 0, ctx->stream>>>(dqkv, acc, dout, qkv, lse, delta, T, C, NH, hs, scale,
                                            dr);
    DS_CU_LAUNCHED(ctx, "flash attention backward (dk, dv)");
    return 0;
}

// The register size for a head of hs: the smallest of 16, 32, 64, 128 that holds it.
static int head_size_ok(ds_cuda_ctx *ctx, int C, int NH) {
    int hs = C / NH;
    if (hs < 1 || hs > 128)
        return DS_CU_FAIL(ctx, "flash attention: head size %d (C %d / %d heads); at most 128",
                          hs, C, NH);
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
}

template <typename E, bool DROP>
static int forward_d(ds_cuda_ctx *ctx, ds_cu_act out, float *lse, const void *qkv, int B, int T,
                     int C, int NH, ds_km_drop dr) {
    switch (head_size_ok(ctx, C, NH)) {
    case -1: return -1;
    case 16: return flash_forward<16, E, DROP>(ctx, out, lse, qkv, B, T, C, NH, dr);
    case 32: return flash_forward<32, E, DROP>(ctx, out, lse, qkv, B, T, C, NH, dr);
    case 64: return flash_forward<64, E, DROP>(ctx, out, lse, qkv, B, T, C, NH, dr);
    default: return flash_forward<128, E, DROP>(ctx, out, lse, qkv, B, T, C, NH, dr);
    }
}

// dropout a template argument too: p = 0 compiles to the kernels without it
template <typename E>
static int forward_e(ds_cuda_ctx *ctx, ds_cu_act out, float *lse, const void *qkv, int B, int T,
                     int C, int NH, ds_km_drop dr) {
    return dr.p > 0.0f ? forward_d<E, true>(ctx, out, lse, qkv, B, T, C, NH, dr)
                       : forward_d<E, false>(ctx, out, lse, qkv, B, T, C, NH, dr);
}

template <typename E, bool DROP>
static int backward_d(ds_cuda_ctx *ctx, ds_cu_act dqkv, int acc, float *scratch, const float *dout,
                      const void *qkv, ds_cu_act out, const float *lse, int B, int T, int C,
                      int NH, ds_km_drop dr) {
    switch (head_size_ok(ctx, C, NH)) {
    case -1: return -1;
    case 16:
        return flash_backward<16, E, DROP>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C,
                                           NH, dr);
    case 32:
        return flash_backward<32, E, DROP>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C,
                                           NH, dr);
    case 64:
        return flash_backward<64, E, DROP>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C,
                                           NH, dr);
    default:
        return flash_backward<128, E, DROP>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C,
                                            NH, dr);
    }
}

template <typename E>
static int backward_e(ds_cuda_ctx *ctx, ds_cu_act dqkv, int acc, float *scratch, const float *dout,
                      const void *qkv, ds_cu_act out, const float *lse, int B, int T, int C,
                      int NH, ds_km_drop dr) {
    return dr.p > 0.0f
               ? backward_d<E, true>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C, NH, dr)
               : backward_d<E, false>(ctx, dqkv, acc, scratch, dout, qkv, out, lse, B, T, C, NH,
                                      dr);
}

// qkv's element type becomes a template argument here (its loads are the kernels' inner
// loops); out is read or written once per element, through ds_cu_act
static int forward_act(ds_cuda_ctx *ctx, ds_cu_act out, float *lse, ds_cu_act qkv, int B,
                       int T, int C, int NH, float p, ds_rng_key key) {
    DS_CU_ARG(ctx, out.p && lse && qkv.p && B > 0 && T > 0 && NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535); // grid.z and grid.y
    DS_CU_ARG(ctx, p >= 0.0f && p < 1.0f);
    ds_km_drop dr = ds_cu_drop(p, key);
    if (!qkv.is16) return forward_e<ds_cu_e32>(ctx, out, lse, qkv.p, B, T, C, NH, dr);
    if (qkv.h == DS_HALF_BF16)
        return forward_e<ds_cu_e16<DS_HALF_BF16>>(ctx, out, lse, qkv.p, B, T, C, NH, dr);
    return forward_e<ds_cu_e16<DS_HALF_F16>>(ctx, out, lse, qkv.p, B, T, C, NH, dr);
}

static int backward_act(ds_cuda_ctx *ctx, ds_cu_act dqkv, int acc, float *scratch, const float *dout,
                        ds_cu_act qkv, ds_cu_act out, const float *lse, int B, int T, int C,
                        int NH, float p, ds_rng_key key) {
    DS_CU_ARG(ctx, dqkv.p && scratch && dout && qkv.p && out.p && lse && B > 0 && T > 0 &&
                       NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535);
    DS_CU_ARG(ctx, p >= 0.0f && p < 1.0f);
    ds_km_drop dr = ds_cu_drop(p, key);
    if (!qkv.is16)
        return backward_e<ds_cu_e32>(ctx, dqkv, acc, scratch, dout, qkv.p, out, lse, B, T, C, NH,
                                     dr);
    if (qkv.h == DS_HALF_BF16)
        return backward_e<ds_cu_e16<DS_HALF_BF16>>(ctx, dqkv, acc, scratch, dout, qkv.p, out, lse,
                                                   B, T, C, NH, dr);
    return backward_e<ds_cu_e16<DS_HALF_F16>>(ctx, dqkv, acc, scratch, dout, qkv.p, out, lse, B, T,
                                              C, NH, dr);
}

extern "C" int ds_cuda_flash_attention_forward(ds_cuda_ctx *ctx, float *out, float *lse,
                                               const float *qkv, int B, int T, int C, int NH,
                                               float p, ds_rng_key key) {
    return forward_act(ctx, ds_cu_f32(out), lse, ds_cu_f32(qkv), B, T, C, NH, p, key);
}

extern "C" int ds_cuda_flash_attention_backward(ds_cuda_ctx *ctx, float *dqkv, int acc,
                                                float *scratch, const float *dout, const float *qkv,
                                                const float *out, const float *lse, int B, int T,
                                                int C, int NH, float p, ds_rng_key key) {
    return backward_act(ctx, ds_cu_f32(dqkv), acc, scratch, dout, ds_cu_f32(qkv), ds_cu_f32(out),
                        lse, B, T, C, NH, p, key);
}

extern "C" int ds_cuda_flash_attention16_forward(ds_cuda_ctx *ctx, ds_half h, void *out,
                                                 float *lse, const void *qkv, int B, int T,
                                                 int C, int NH, float p, ds_rng_key key, int in16,
                                                 int out16) {
    return forward_act(ctx, ds_cu_act_of(out, out16, h), lse, ds_cu_act_of(qkv, in16, h), B, T,
                       C, NH, p, key);
}

extern "C" int ds_cuda_flash_attention16_backward(ds_cuda_ctx *ctx, ds_half h, void *dqkv, int acc,
                                                  float *scratch, const float *dout,
                                                  const void *qkv, const void *out,
                                                  const float *lse, int B, int T, int C, int NH,
                                                  float p, ds_rng_key key, int in16, int out16,
                                                  int din16) {
    return backward_act(ctx, ds_cu_act_of(dqkv, din16, h), acc, scratch, dout,
                        ds_cu_act_of(qkv, in16, h), ds_cu_act_of(out, out16, h), lse, B, T, C, NH,
                        p, key);
}
