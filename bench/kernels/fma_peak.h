/* The machine's fp32 multiply-add peak, measured: no GEMM, however good, runs faster. */
#ifndef DS_BENCH_FMA_PEAK_H
#define DS_BENCH_FMA_PEAK_H

typedef struct fma_peak {
    double gflops;   /* fp32 FLOP/s of all threads together, 1e9 */
    const char *isa; /* the vector instructions measured: "avx512", "avx2+fma", "sse2" */
} fma_peak;

/* Best of a few runs of independent multiply-add chains on `threads` OpenMP threads at once. */
fma_peak fma_peak_measure(int threads);

#endif
