/* Which OpenBLAS core (its set of kernels) a CPU can run, and whether to override the one
 * OpenBLAS picked (blas_core.c); the start-up check of a core's GEMM (blas_check.c). The
 * decision is a pure function of the CPU's flags and the core names, so it is tested on
 * any machine; cpu_env.c applies it to the running process. */
#ifndef DS_BLAS_CORE_H
#define DS_BLAS_CORE_H

#include <stddef.h>

/* The CPU features the cores need (as the OS enables them). */
enum {
    DS_CPU_AVX = 1 << 0,
    DS_CPU_AVX2 = 1 << 1,
    DS_CPU_FMA = 1 << 2,
    DS_CPU_AVX512F = 1 << 3,
    DS_CPU_AVX512BW = 1 << 4,
    DS_CPU_AVX512VL = 1 << 5,
    DS_CPU_AVX512DQ = 1 << 6,
    DS_CPU_AVX512BF16 = 1 << 7,
};

/* This CPU's flags (0 on a CPU that is not x86). */
unsigned ds_cpu_flags(void);
/* The flags' names, space-separated, into buf ("" when none). */
void ds_cpu_flags_names(unsigned flags, char *buf, size_t cap);

/* The best core OpenBLAS 0.3.21 accepts in OPENBLAS_CORETYPE that the flags support:
 * Cooperlake (AVX-512 with BF16), SkylakeX (AVX-512 F/BW/VL/DQ), Haswell (AVX2 + FMA),
 * Sandybridge (AVX); NULL when none of them. */
const char *ds_blas_core_best(unsigned flags);

/* The core to set in OPENBLAS_CORETYPE, or NULL to keep what runs: the best core of the
 * flags when OpenBLAS picked a known core of a lower instruction set, unless the user
 * set OPENBLAS_CORETYPE (user_coretype non-NULL: theirs always wins). A core name this
 * table does not know (a newer OpenBLAS's, "Unknown") is never second-guessed. */
const char *ds_blas_core_choice(unsigned flags, const char *openblas_core,
                                const char *user_coretype);

/* Whether core is one dsrun sets (a ds_blas_core_best of some flags) and the flags
 * support it. Other cores are not vouched for: Bulldozer's AVX kernels use FMA4, which
 * later AMD CPUs lack. */
int ds_blas_core_supported(unsigned flags, const char *core);

/* Row-major C[M,N] = alpha * op(A) op(B) + beta * C, as cblas_sgemm with CblasRowMajor. */
typedef void (*ds_sgemm_fn)(int transA, int transB, int M, int N, int K, float alpha,
                            const float *A, int lda, const float *B, int ldb, float beta,
                            float *C, int ldc);
/* OpenBLAS's sgemm as a ds_sgemm_fn. */
void ds_blas_sgemm(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Checks sgemm against a plain C reference in double on a few shapes (odd sizes, all four
 * transpose cases, beta 0 and 1, padded leading dimensions): 0 when every element is
 * within fp32 rounding of the reference, else -1 with the first difference in why. */
int ds_blas_check(ds_sgemm_fn sgemm, char *why, size_t cap);

#endif
