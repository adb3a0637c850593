// 16-bit Linear layers through cuBLASLt: bf16 / fp16 inputs and outputs, fp32
// accumulation on tensor cores, the bias (and the GELU, saving its input for backward)
// in the GEMM's epilogue, and in backward the GELU's derivative fused into dinp's GEMM.
// Row-major operands as column-major ones (llm.c's arrangement): out^T[OC,N] =
// W^T(op T on W's [C,OC] view) * inp^T. One algorithm per shape, chosen once by the
// heuristic with a fixed workspace (the context's), so the same call gives the same bits.
#include <pthread.h>
#include <string.h>

#include "cuda_common.cuh"
#include "half_math.cuh"

struct lt_key {
    int m, n, k, lda, ldb, ldd, ta, tb, type, d_f32, epilogue, beta1;
    int align_a, align_b, align_d, aux_align, bias_align;
};

struct lt_plan {
    lt_key key;
    cublasLtMatmulAlgo_t algo;
};

#define LT_CACHE 64
static lt_plan g_plans[LT_CACHE];
static int g_nplans;
static pthread_mutex_t g_plans_mu = PTHREAD_MUTEX_INITIALIZER;

// The alignment cuBLASLt may assume of a matrix: its pointer's and its columns' (ld_bytes
// apart), whichever is less. The heuristic is told each matrix's own truth: a kernel
// loading 16-byte vectors (Hopper's TMA needs 16-byte aligned addresses and strides,
// cuda.h's cuTensorMapEncodeTiled) reads a misaligned row out of bounds or faults, and one
// narrow matrix (the head's [N, 50,257] logits, rows 2 bytes aligned) must not narrow the
// others' loads. A NULL pointer (no aux) is aligned.
static int align_of(const void *p, size_t ld_bytes) {
    uintptr_t u = (uintptr_t)p | (uintptr_t)ld_bytes;
    int a = 256;
    while (a > 1 && (u & (uintptr_t)(a - 1))) a >>= 1;
    return a;
}

struct lt_call {
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A, *B;
    void *D;
    int lda, ldb, ldd;
    float beta;
    cublasLtEpilogue_t epilogue;
    const void *bias;
    const void *aux;
    int64_t aux_ld;
    int d_f32; // D (and the bias) in fp32: a 16-bit product feeding fp32 activations
};

#define LT_CHECK(ctx, call)                                                                \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            rc = DS_CU_FAIL(ctx, "%s: %s", #call, ds_cu_blas_status(s_));                  \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)

static int lt_matmul(ds_cuda_ctx *ctx, ds_half h, const lt_call *c) {
    if (!ctx->lt) DS_CU_BLAS(ctx, cublasLtCreate(&ctx->lt));
    cudaDataType_t t = h == DS_HALF_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    // cublasLt.h: the heuristic reads the bias and aux pointers' values for the alignment
    // it assumes, so a plan made for aligned ones must not serve less aligned ones
    cudaDataType_t dt = c->d_f32 ? CUDA_R_32F : t;
    lt_key key = {c->m, c->n, c->k, c->lda, c->ldb, c->ldd, (int)c->ta, (int)c->tb, (int)t,
                  c->d_f32, (int)c->epilogue, c->beta != 0.0f,
                  align_of(c->A, (size_t)c->lda * 2), align_of(c->B, (size_t)c->ldb * 2),
                  align_of(c->D, (size_t)c->ldd * (c->d_f32 ? 4 : 2)),
                  align_of(c->aux, (size_t)c->aux_ld * 2), align_of(c->bias, 0)};
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    float alpha = 1.0f;
    int rc = 0;
    LT_CHECK(ctx, cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &c->ta, sizeof c->ta));
    LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &c->tb, sizeof c->tb));
    LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c->epilogue,
                                                 sizeof c->epilogue));
    if (c->bias)
        LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                     &c->bias, sizeof c->bias));
    if (c->aux) {
        LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                     &c->aux, sizeof c->aux));
        LT_CHECK(ctx, cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                     &c->aux_ld, sizeof c->aux_ld));
    }
    // the stored shapes: op(A) is m x k, op(B) k x n
    LT_CHECK(ctx, cublasLtMatrixLayoutCreate(&la, t, c->ta == CUBLAS_OP_N ? c->m : c->k,
                                             c->ta == CUBLAS_OP_N ? c->k : c->m, c->lda));
    LT_CHECK(ctx, cublasLtMatrixLayoutCreate(&lb, t, c->tb == CUBLAS_OP_N ? c->k : c->n,
                                             c->tb == CUBLAS_OP_N ? c->n : c->k, c->ldb));
    LT_CHECK(ctx, cublasLtMatrixLayoutCreate(&ld, dt, c->m, c->n, c->ldd));
    {
        cublasLtMatmulAlgo_t algo;
        int found = 0;
        pthread_mutex_lock(&g_plans_mu);
        for (int i = 0; i < g_nplans && !found; i++)
            if (!memcmp(&g_plans[i].key, &key, sizeof key)) algo = g_plans[i].algo, found = 1;
        pthread_mutex_unlock(&g_plans_mu);
        if (!found) {
            uint64_t ws = ctx->blas_ws_bytes;
            uint32_t al_a = (uint32_t)key.align_a, al_b = (uint32_t)key.align_b,
                     al_d = (uint32_t)key.align_d;
            // A split-K reduction "in place" or "in the output type" (cublasLt.h) would add
            // a 16-bit D's partial sums in 16 bits: more than the one rounding per element
            // the contract has (kernel_table.h), and the weight gradient's GEMM (k = the
            // rows, m x n small) is where the heuristic splits K; partials in fp32 only
            uint32_t red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
            LT_CHECK(ctx, cublasLtMatmulPreferenceCreate(&pref));
            LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
            LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
            LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
            LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
            LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
            if (!c->d_f32)
                LT_CHECK(ctx, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red));
            cublasLtMatmulHeuristicResult_t res;
            int n = 0;
            // no algorithm comes back as NOT_SUPPORTED as well as n == 0 (cublasLt.h)
            cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx->lt, desc, la, lb, ld, ld, pref,
                                                               1, &res, &n);
            if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
                rc = DS_CU_FAIL(ctx, "cublasLtMatmulAlgoGetHeuristic: %s", ds_cu_blas_status(hs));
                goto done;
            }
            if (hs == CUBLAS_STATUS_NOT_SUPPORTED || n == 0) {
                rc = DS_CU_FAIL(ctx,
                                "cuBLASLt has no algorithm for %dx%dx%d (op %c%c, %s in, %s out, "
                                "epilogue %d, beta %g, alignment A %d B %d D %d bytes)",
                                c->m, c->n, c->k, c->ta == CUBLAS_OP_T ? 'T' : 'N',
                                c->tb == CUBLAS_OP_T ? 'T' : 'N',
                                t == CUDA_R_16BF ? "bf16" : "fp16", c->d_f32 ? "fp32" : "16-bit",
                                (int)c->epilogue, (double)c->beta, key.align_a, key.align_b,
                                key.align_d);
                goto done;
            }
            algo = res.algo;
            pthread_mutex_lock(&g_plans_mu);
            if (g_nplans < LT_CACHE) g_plans[g_nplans++] = lt_plan{key, algo};
            pthread_mutex_unlock(&g_plans_mu);
        }
        LT_CHECK(ctx, cublasLtMatmul(ctx->lt, desc, &alpha, c->A, la, c->B, lb, &c->beta, c->D, ld,
                                     c->D, ld, &algo, ctx->blas_ws, ctx->blas_ws_bytes, ctx->stream));
    }
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return rc;
}

extern "C" int ds_cuda_matmul_forward_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *out,
                                           const uint16_t *inp, const uint16_t *weight,
                                           const uint16_t *bias, uint16_t *pre_gelu, int N,
                                           int C, int OC) {
    DS_CU_ARG(ctx, out && inp && weight && N > 0 && C > 0 && OC > 0);
    DS_CU_ARG(ctx, !pre_gelu || OC % 8 == 0);
    lt_call c = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, inp, out, C, C, OC, 0.0f,
                 CUBLASLT_EPILOGUE_DEFAULT, bias, pre_gelu, OC, 0};
    if (pre_gelu) c.epilogue = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    else if (bias) c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    return lt_matmul(ctx, h, &c);
}

// dbias[c] = round16(dbias[c] + sum) with the column sums in fp32 (fixed order)
__global__ static void add_sums_k(ds_half h, uint16_t *dbias, const float *sums, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c < OC) dbias[c] = ds_cu_narrow(h, ds_cu_widen(h, dbias[c]) + sums[c]);
}

struct col_of_half {
    const uint16_t *m;
    int C;
    ds_half h;
    __device__ float2 operator()(int n, int c) const {
        return make_float2(ds_cu_widen(h, m[(size_t)n * C + c]), 0.0f);
    }
};

// dweight[OC,C] += dout^T @ inp and dbias += dout's column sums, dout's rows ldo apart (a
// chunk of a wider output gradient's columns, read in place)
static int weight_grads_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *dweight, uint16_t *dbias,
                             const uint16_t *dout, int ldo, const uint16_t *inp, int N, int C,
                             int OC) {
    if (dweight) { // dW[OC,C] += dout^T @ inp
        lt_call c = {CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, inp, dout, dweight, C, ldo, C, 1.0f,
                     CUBLASLT_EPILOGUE_DEFAULT, NULL, NULL, 0, 0};
        if (lt_matmul(ctx, h, &c) != 0) return -1;
    }
    if (!dbias) return 0;
    // the column sums go to fp32 after colsum's partials, in the same scratch buffer
    int R = ds_cu_colsum_rows(N), P = (N + R - 1) / R;
    size_t part = ((size_t)P * OC * sizeof(float2) + 255) & ~(size_t)255;
    char *buf = (char *)ds_cu_scratch(ctx, part + (size_t)OC * sizeof(float));
    if (!buf) return -1;
    float *sums = (float *)(buf + part);
    DS_CU_CHECK(ctx, cudaMemsetAsync(sums, 0, (size_t)OC * sizeof(float), ctx->stream));
    if (ds_cu_colsum2(ctx, sums, (float *)NULL, N, OC, col_of_half{dout, ldo, h}) != 0) return -1;
    add_sums_k<<<(OC + 255) / 256, 256, 0, ctx->stream>>>(h, dbias, sums, OC);
    DS_CU_LAUNCHED(ctx, "matmul dbias (16-bit)");
    return 0;
}

extern "C" int ds_cuda_matmul_backward_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *dinp,
                                            uint16_t *dweight, uint16_t *dbias,
                                            const uint16_t *dout, const uint16_t *inp,
                                            const uint16_t *weight, const uint16_t *pre_gelu,
                                            int N, int C, int OC) {
    DS_CU_ARG(ctx, dout && N > 0 && C > 0 && OC > 0);
    DS_CU_ARG(ctx, !dinp || weight);
    DS_CU_ARG(ctx, !dweight || inp);
    DS_CU_ARG(ctx, !pre_gelu || C % 8 == 0);
    if (dinp) { // dinp[N,C] (+)= dout[N,OC] @ W[OC,C]
        lt_call c = {CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, weight, dout, dinp, C, OC, C,
                     pre_gelu ? 0.0f : 1.0f, pre_gelu ? CUBLASLT_EPILOGUE_DGELU : CUBLASLT_EPILOGUE_DEFAULT,
                     NULL, pre_gelu, C, 0};
        if (lt_matmul(ctx, h, &c) != 0) return -1;
    }
    return weight_grads_half(ctx, h, dweight, dbias, dout, OC, inp, N, C, OC);
}

// ---- 16-bit weights, fp32 or 16-bit activations (kernel_table.h's matmul16 pair) -------
// fp32 activations are rounded to 16 bits into the workspace (ds_matmul16_workspace's
// DS_GEMM16_HALF layout: its parts in the order below, a 16-bit activation's part
// absent), 16-bit ones go to the GEMMs as they are, with the 16-bit weight. An fp32
// output is D in fp32 with the bias widened to fp32 for the epilogue; a 16-bit one is D in
// that format, the bias then read in it (cublasLt.h: the bias takes D's type by default).
// dinp is fp32; the weight gradient is the 16-bit GEMM above with beta = 1 (one rounding).

extern "C" int ds_cuda_matmul16_forward(ds_cuda_ctx *ctx, ds_half h, void *out, const void *inp,
                                        int io16, const uint16_t *weight, const uint16_t *bias,
                                        int N, int C, int OC, void *ws) {
    int in16 = io16 & DS_MM16_IN, out16 = io16 & DS_MM16_OUT;
    DS_CU_ARG(ctx, out && inp && weight && N > 0 && C > 0 && OC > 0);
    DS_CU_ARG(ctx, ws || (in16 && (out16 || !bias)));
    char *at = (char *)ws;
    const uint16_t *x = (const uint16_t *)inp;
    if (!in16) {
        uint16_t *r = (uint16_t *)at;
        at += ds_ws_part((size_t)N * C * 2);
        if (ds_cuda_half_from_f32(ctx, h, r, (const float *)inp, (size_t)N * C) != 0) return -1;
        x = r;
    }
    if (out16)
        return ds_cuda_matmul_forward_half(ctx, h, (uint16_t *)out, x, weight, bias, NULL, N, C,
                                           OC);
    float *b = bias ? (float *)at : NULL;
    if (b && ds_cuda_half_to_f32(ctx, h, b, bias, (size_t)OC) != 0) return -1;
    lt_call c = {CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, weight, x, out, C, C, OC, 0.0f,
                 b ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT, b, NULL, 0, 1};
    return lt_matmul(ctx, h, &c);
}

__device__ static uint16_t to16(ds_half h, float x) { return ds_cu_narrow(h, x); }
__device__ static uint16_t to16(ds_half, uint16_t x) { return x; }

// d[n * ld + j] = round16(dout[n, o0 + j]) for j < K: a chunk of the output gradient's
// columns (fp32 rounded, or 16-bit copied), its rows ld apart
template <typename S>
__global__ static void chunk_cols_k(ds_half h, uint16_t *d, int ld, const S *dout, int N, int OC,
                                    int o0, int K) {
    GRID_STRIDE(i, (size_t)N * K) d[i / K * ld + i % K] = to16(h, dout[i / K * OC + o0 + i % K]);
}

// In chunks of DS_MATMUL16_COLS output columns (kernel_table.h), as the CPU reference. A
// chunk's 16-bit output gradient is read in place (rows OC apart: its leading dimension)
// when its rows are 16-byte aligned (OC % 8 == 0, as ds_matmul16_workspace assumes);
// otherwise it goes through the workspace as an fp32 one's rounded chunk does, rows
// ds_matmul16_ld(k) apart. GPT's head (OC = 50,257) is the case: its rows in place are 2
// bytes aligned, which keeps the two largest GEMMs of the step off Hopper's TMA kernels
// (16-byte strides), while the copy costs one pass over 2 * N * OC bytes.
extern "C" int ds_cuda_matmul16_backward(ds_cuda_ctx *ctx, ds_half h, float *dinp, int acc,
                                         uint16_t *dweight, uint16_t *dbias, const void *dout,
                                         const void *inp, int io16, const uint16_t *weight, int N,
                                         int C, int OC, void *ws) {
    int in16 = io16 & DS_MM16_IN, out16 = io16 & DS_MM16_OUT;
    int copy = ds_matmul16_dout_copied(io16, (size_t)OC);
    DS_CU_ARG(ctx, dout && N > 0 && C > 0 && OC > 0);
    DS_CU_ARG(ctx, ws || (!copy && (in16 || !dweight)));
    DS_CU_ARG(ctx, !dinp || weight);
    DS_CU_ARG(ctx, !dweight || inp);
    int K = (int)ds_matmul16_cols((size_t)OC);
    char *at = (char *)ws;
    uint16_t *d = NULL;
    if (copy) {
        d = (uint16_t *)at;
        at += ds_ws_part((size_t)N * ds_matmul16_ld((size_t)K) * 2);
    }
    const uint16_t *x = (const uint16_t *)inp;
    if (dweight && !in16) {
        uint16_t *r = (uint16_t *)at;
        if (ds_cuda_half_from_f32(ctx, h, r, (const float *)inp, (size_t)N * C) != 0) return -1;
        x = r;
    }
    for (int o0 = 0; o0 < OC; o0 += K) {
        int k = OC - o0 < K ? OC - o0 : K;
        const uint16_t *dc = (const uint16_t *)dout + o0;
        int ldo = OC;
        if (copy) {
            size_t n = (size_t)N * k;
            ldo = (int)ds_matmul16_ld((size_t)k);
            if (out16)
                chunk_cols_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(
                    h, d, ldo, (const uint16_t *)dout, N, OC, o0, k);
            else
                chunk_cols_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(
                    h, d, ldo, (const float *)dout, N, OC, o0, k);
            DS_CU_LAUNCHED(ctx, "matmul16 output gradient chunk to 16 bits");
            dc = d;
        }
        if (dinp) { // dinp[N,C] += dout16[N,k] @ W[o0:o0+k, C], in fp32
            lt_call c = {CUBLAS_OP_N,
                         CUBLAS_OP_N,
                         C,
                         N,
                         k,
                         weight + (size_t)o0 * C,
                         dc,
                         dinp,
                         C,
                         ldo,
                         C,
                         acc || o0 > 0 ? 1.0f : 0.0f,
                         CUBLASLT_EPILOGUE_DEFAULT,
                         NULL,
                         NULL,
                         0,
                         1};
            if (lt_matmul(ctx, h, &c) != 0) return -1;
        }
        if (weight_grads_half(ctx, h, dweight ? dweight + (size_t)o0 * C : NULL,
                              dbias ? dbias + o0 : NULL, dc, ldo, dweight ? x : NULL, N, C,
                              k) != 0)
            return -1;
    }
    return 0;
}
