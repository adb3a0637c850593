/* The start-up check of a core dsrun chose: sgemm against a plain C reference on shapes
 * that reach the kernels' edge cases (sizes that are not multiples of any vector width or
 * block, a single element, padded rows), each transpose case, beta 0 over a C full of NaN
 * (the engine writes outputs it never cleared) and beta 1. A wrong kernel is off by O(1);
 * fp32 rounding of a K-term sum stays within about K * FLT_EPSILON of the sum of the
 * terms' magnitudes, so the tolerance is set there. */
#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "blas_core.h"

void ds_blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

static const struct {
    int M, N, K, pad;
} SHAPES[] = {{1, 1, 1, 0}, {7, 13, 5, 1}, {33, 17, 65, 3}, {64, 64, 64, 0}, {67, 129, 35, 2}};

static void fill(float *x, size_t n, uint64_t *state) {
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        x[i] = (float)((double)((z ^ (z >> 31)) >> 40) / (double)(1 << 23) - 1.0); /* [-1, 1) */
    }
}

/* One case; 0 when C matches, else -1 with the first difference. */
static int check_case(ds_sgemm_fn sgemm, int M, int N, int K, int pad, int ta, int tb,
                      float beta, float *A, float *B, float *C, float *C0, char *why,
                      size_t cap) {
    /* op(A) is M x K: stored K x M when transposed; likewise op(B), K x N */
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    uint64_t state = (uint64_t)(M * 131 + N * 17 + K) * 4 + (uint64_t)(ta * 2 + tb);
    fill(A, (size_t)(ta ? K : M) * lda, &state);
    fill(B, (size_t)(tb ? N : K) * ldb, &state);
    fill(C0, (size_t)M * ldc, &state);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = beta == 0.0f ? NAN : C0[i];
    sgemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double sum = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j], mag = fabs(sum);
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                sum += a * b;
                mag += fabs(a * b);
            }
            double got = C[(size_t)i * ldc + j], tol = (K + 2) * FLT_EPSILON * mag + FLT_MIN;
            if (!(fabs(got - sum) <= tol)) {
                snprintf(why, cap,
                         "sgemm M=%d N=%d K=%d transA=%d transB=%d beta=%g: C[%d,%d] = %.9g, "
                         "the reference %.9g (tolerance %.2g)",
                         M, N, K, ta, tb, (double)beta, i, j, got, sum, tol);
                return -1;
            }
        }
    return 0;
}

int ds_blas_check(ds_sgemm_fn sgemm, char *why, size_t cap) {
    size_t most = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        size_t m = (size_t)SHAPES[s].M, n = (size_t)SHAPES[s].N, k = (size_t)SHAPES[s].K;
        size_t big = (m > n ? m : n) > k ? (m > n ? m : n) : k, p = (size_t)SHAPES[s].pad;
        if (big * (big + p) > most) most = big * (big + p);
    }
    float *A = malloc(most * sizeof *A), *B = malloc(most * sizeof *B);
    float *C = malloc(most * sizeof *C), *C0 = malloc(most * sizeof *C0);
    int rc = 0;
    if (!A || !B || !C || !C0) {
        snprintf(why, cap, "sgemm check: out of memory");
        rc = -1;
    }
    for (size_t s = 0; rc == 0 && s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int c = 0; rc == 0 && c < 8; c++)
            rc = check_case(sgemm, SHAPES[s].M, SHAPES[s].N, SHAPES[s].K, SHAPES[s].pad, c & 1,
                            (c >> 1) & 1, (float)(c >> 2), A, B, C, C0, why, cap);
    free(A);
    free(B);
    free(C);
    free(C0);
    return rc;
}
