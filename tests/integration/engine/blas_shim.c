/* Preloaded into dsrun by blas_choice.sh (LD_PRELOAD) to play an OpenBLAS that picks a
 * low core on this CPU, so dsrun's own choice runs end to end on any machine:
 *   BLAS_SHIM_PICK=NAME  openblas_get_corename() says NAME while OPENBLAS_CORETYPE is unset
 *                        (OpenBLAS's own pick); with it set, the real core
 *   BLAS_SHIM_BREAK=1    sgemm adds 1 to C's last element of a 7 x 13 product while
 *                        OPENBLAS_CORETYPE is set: a core whose kernels are wrong at an edge
 *   BLAS_SHIM_LOG=PATH   each program start appends "start OPENBLAS_CORETYPE" to PATH, so
 *                        the test counts the restarts */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT */
#endif
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void log_start(void) {
    const char *path = getenv("BLAS_SHIM_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (!f) return;
    const char *coretype = getenv("OPENBLAS_CORETYPE");
    fprintf(f, "start %s\n", coretype ? coretype : "-");
    fclose(f);
}

char *openblas_get_corename(void) {
    char *(*real)(void) = (char *(*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    char *pick = getenv("BLAS_SHIM_PICK");
    return pick && !getenv("OPENBLAS_CORETYPE") ? pick : real();
}

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                 const enum CBLAS_TRANSPOSE tb, const blasint M, const blasint N,
                 const blasint K, const float alpha, const float *A, const blasint lda,
                 const float *B, const blasint ldb, const float beta, float *C,
                 const blasint ldc) {
    void (*real)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                 const blasint, const blasint, const blasint, const float, const float *,
                 const blasint, const float *, const blasint, const float, float *,
                 const blasint);
    *(void **)&real = dlsym(RTLD_NEXT, "cblas_sgemm");
    real(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (getenv("BLAS_SHIM_BREAK") && getenv("OPENBLAS_CORETYPE") && M == 7 && N == 13)
        C[(size_t)(M - 1) * (size_t)ldc + (size_t)N - 1] += 1.0f;
}
