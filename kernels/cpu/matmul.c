/* Linear layer through OpenBLAS. Weights are [OC, C] (nn.Linear layout), so the forward
 * is a GEMM with the weight transposed; bias is folded in by pre-filling out and beta=1.
 *
 * One thread pool: OpenBLAS runs single-threaded and the GEMM's output is split across
 * the OpenMP threads, each calling sgemm on its own block. With OpenBLAS's own threads
 * beside OpenMP's on the same cores, each pool's idle threads spin while the other works
 * (OpenBLAS's for a long timeout), and an OpenMP kernel right after a GEMM ran several
 * times slower. Each output element is still summed over K by one sgemm call, so the
 * split does not change the bits. */
#include <cblas.h>
#include <omp.h>
#include <string.h>

#include "kernel_table.h" /* ds_matmul16_workspace's layout */
#include "half_block.h"
#include "kernels.h"
#include "simd.h"

void openblas_set_num_threads(int num_threads);

/* OpenBLAS must be single-threaded before two OpenMP threads call it; done once here
 * too, for programs that never call ds_kernels_set_threads. */
static void blas_single_threaded(void) {
    static int done;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
#pragma omp critical(ds_blas_init)
        if (!done) {
            openblas_set_num_threads(1);
            __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
        }
    }
}

/* Row-major C[M,N] = alpha*op(A)op(B) + beta*C, the larger of M and N split in blocks of
 * 16 over the threads (the other operand, the smaller one, is packed by every thread). */
static void sgemm_parallel(int transA, int transB, int M, int N, int K, const float *A,
                           int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    blas_single_threaded();
    enum CBLAS_TRANSPOSE ta = transA ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = transB ? CblasTrans : CblasNoTrans;
    int split_m = M >= N;
    int D = split_m ? M : N;
    double flops = 2.0 * M * N * K;
    int nt = flops < 4e6 || D < 32 ? 1 : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
    {
        int id = omp_get_thread_num(), n = omp_get_num_threads();
        int per = ((D + n - 1) / n + 15) / 16 * 16;
        int lo = id * per, hi = lo + per < D ? lo + per : D;
        if (lo < hi && split_m)
            cblas_sgemm(CblasRowMajor, ta, tb, hi - lo, N, K, 1.0f,
                        transA ? A + lo : A + (size_t)lo * lda, lda, B, ldb, beta,
                        C + (size_t)lo * ldc, ldc);
        else if (lo < hi)
            cblas_sgemm(CblasRowMajor, ta, tb, M, hi - lo, K, 1.0f, A, lda,
                        transB ? B + (size_t)lo * ldb : B + lo, ldb, beta, C + lo, ldc);
    }
}

/* out[n, 0..K) = bias for each of N rows ldo apart: the GEMM then adds with beta = 1 */
static void fill_bias(float *out, int ldo, const float *bias, int N, int K) {
#pragma omp parallel for schedule(static) if ((size_t)N * K > DS_PAR_MIN)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * ldo, bias, (size_t)K * sizeof(float));
}

void ds_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                       int N, int C, int OC) {
    if (bias) fill_bias(out, OC, bias, N, OC);
    sgemm_parallel(0, 1, N, OC, C, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

/* dbias sums each column over rows in row order; threads split the columns, so the
 * result does not depend on the thread count. */
static void bias_backward(float *dbias, const float *dout, int N, int OC) {
    enum { COLS = 64 }; /* 12 blocks for C=768: balanced over 2, 3, 4 or 6 threads */
#pragma omp parallel for schedule(static) if ((size_t)N * OC > DS_PAR_MIN)
    for (int c0 = 0; c0 < OC; c0 += COLS) {
        int c1 = c0 + COLS < OC ? c0 + COLS : OC;
        float acc[COLS];
        for (int c = c0; c < c1; c++) acc[c - c0] = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * OC;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
    }
}

void ds_matmul_backward(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int N, int C, int OC) {
    if (dinp) sgemm_parallel(0, 0, N, C, OC, dout, OC, weight, C, acc ? 1.0f : 0.0f, dinp, C);
    if (dweight) sgemm_parallel(1, 0, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) bias_backward(dbias, dout, N, OC);
}

/* ---- 16-bit weights (kernel_table.h's matmul16 pair) ----------------------------------
 * The reference of what a tensor-core GEMM computes: operands rounded to 16 bits, exact
 * products summed in fp32. Here the rounded operands are fp32 copies in the workspace
 * and OpenBLAS sums them, so the bits are sgemm's on the rounded values. Both entries go
 * through the output columns in chunks of DS_MATMUL16_COLS (kernel_table.h), so the
 * weight's image is one chunk's rows; each output element is still one sgemm's dot
 * product, so only backward's dinp (summed over OC) depends on the chunking. */

/* d = round16(src) over n elements, src fp32 or (half16) already 16-bit, then widened:
 * the same values either way */
static void rounded(ds_half h, float *d, const void *src, int half16, size_t n) {
    if (half16) ds_half_to_f32(h, d, src, n);
    else ds_half_round_f32(h, d, src, n);
}

/* d[n, j] = round16(src[n, o0 + j]) for j < K: a chunk of columns of an [N, OC] matrix,
 * fp32 or (half16) 16-bit */
static void round_cols(ds_half h, float *d, const void *src, int half16, int N, int OC, int o0,
                       int K) {
#pragma omp parallel for schedule(static) if ((size_t)N * K > DS_PAR_MIN)
    for (int n = 0; n < N; n++) {
        size_t at = (size_t)n * OC + o0;
        if (half16) ds_half_widen(h, d + (size_t)n * K, (const uint16_t *)src + at, (size_t)K);
        else ds_half_round_f32(h, d + (size_t)n * K, (const float *)src + at, (size_t)K);
    }
}

/* dst[n, o0 + j] = round16(y[n, j]) for j < K: a chunk's fp32 result into a 16-bit output */
static void narrow_cols(ds_half h, uint16_t *dst, const float *y, int N, int OC, int o0, int K) {
#pragma omp parallel for schedule(static) if ((size_t)N * K > DS_PAR_MIN)
    for (int n = 0; n < N; n++)
        ds_half_narrow(h, dst + (size_t)n * OC + o0, y + (size_t)n * K, (size_t)K);
}

void ds_matmul16_forward(ds_half h, void *out, const void *inp, int io16, const uint16_t *weight,
                         const uint16_t *bias, int N, int C, int OC, void *ws) {
    size_t K = ds_matmul16_cols((size_t)OC), xn = (size_t)N * C;
    int out16 = io16 & DS_MM16_OUT;
    float *w = ws;
    float *x = (float *)((char *)w + ds_ws_part(K * C * 4));
    float *b = (float *)((char *)x + ds_ws_part(xn * 4));
    float *part = (float *)((char *)b + ds_ws_part(K * 4)); /* a chunk's fp32 result */
    rounded(h, x, inp, io16 & DS_MM16_IN, xn);
    for (int o0 = 0; o0 < OC; o0 += (int)K) {
        int k = OC - o0 < (int)K ? OC - o0 : (int)K;
        /* a 16-bit out: the chunk in the workspace, then rounded into out */
        float *y = out16 ? part : (float *)out + o0;
        int ldy = out16 ? k : OC;
        ds_half_to_f32(h, w, weight + (size_t)o0 * C, (size_t)k * C);
        if (bias) {
            ds_half_to_f32(h, b, bias + o0, (size_t)k);
            fill_bias(y, ldy, b, N, k);
        }
        sgemm_parallel(0, 1, N, k, C, x, C, w, C, bias ? 1.0f : 0.0f, y, ldy);
        if (out16) narrow_cols(h, out, y, N, OC, o0, k);
    }
}

void ds_matmul16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                          const void *dout, const void *inp, int io16, const uint16_t *weight,
                          int N, int C, int OC, void *ws) {
    size_t K = ds_matmul16_cols((size_t)OC), xn = (size_t)N * C;
    float *w = ws; /* the weight chunk's image, then its gradient */
    float *x = (float *)((char *)w + ds_ws_part(K * C * 4));
    float *db = (float *)((char *)x + ds_ws_part(xn * 4));
    float *d = (float *)((char *)db + ds_ws_part(K * 4));
    if (dweight) rounded(h, x, inp, io16 & DS_MM16_IN, xn);
    for (int o0 = 0; o0 < OC; o0 += (int)K) {
        int k = OC - o0 < (int)K ? OC - o0 : (int)K;
        size_t wn = (size_t)k * C;
        round_cols(h, d, dout, io16 & DS_MM16_OUT, N, OC, o0, k);
        if (dinp) {
            ds_half_to_f32(h, w, weight + (size_t)o0 * C, wn);
            /* writing: the first chunk writes, the next ones add (the bits of adding
             * every chunk into zeros) */
            float beta = acc || o0 > 0 ? 1.0f : 0.0f;
            sgemm_parallel(0, 0, N, C, k, d, k, w, C, beta, dinp, C);
        }
        if (dweight) {
            sgemm_parallel(1, 0, k, C, N, d, k, x, C, 0.0f, w, C);
            ds_half_acc_f32(h, dweight + (size_t)o0 * C, w, wn);
        }
        if (dbias) {
            memset(db, 0, (size_t)k * sizeof *db);
            bias_backward(db, d, N, k);
            ds_half_acc_f32(h, dbias + o0, db, (size_t)k);
        }
    }
}
