/* Independent multiply-add chains in the widest vectors the CPU has, on every thread at
 * once. Twelve chains per thread cover the FMA latency times the number of FMA pipes of
 * the cores we run on (4 cycles x 2 pipes), so the loop is bound by FMA throughput alone.
 * The chains are unrolled so that they live in registers at any optimisation level.
 * sgemm can only approach this figure; a training step whose GEMMs ran at it, with
 * nothing else to do, is the fastest any fp32 implementation can be on these cores. */
#include "fma_peak.h"

#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { CHAINS = 12 }; /* an enum, not a macro: #pragma GCC unroll does not expand macros */
#define ITERS 40000000L
#define RUNS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Each returns the chains' sum, so the compiler keeps the work. A step of one chain is
 * 2 FLOPs per lane: a multiply and an add. */
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float chains_avx512(long iters) {
    __m512 a[CHAINS], m = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
    for (int j = 0; j < CHAINS; j++) a[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll CHAINS
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_fmadd_ps(a[j], m, b);
    float s = 0.0f;
    for (int j = 0; j < CHAINS; j++) s += _mm512_reduce_add_ps(a[j]);
    return s;
}

__attribute__((target("avx2,fma"))) static float chains_avx2(long iters) {
    __m256 a[CHAINS], m = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
    for (int j = 0; j < CHAINS; j++) a[j] = _mm256_set1_ps((float)j);
    for (long i = 0; i < iters; i++)
#pragma GCC unroll CHAINS
        for (int j = 0; j < CHAINS; j++) a[j] = _mm256_fmadd_ps(a[j], m, b);
    float lanes[8], s = 0.0f;
    for (int j = 0; j < CHAINS; j++) {
        _mm256_storeu_ps(lanes, a[j]);
        for (int k = 0; k < 8; k++) s += lanes[k];
    }
    return s;
}
#endif

/* Without FMA: a multiply and a dependent add per step, four lanes wide. */
static float chains_plain(long iters) {
    float a[CHAINS][4];
    for (int j = 0; j < CHAINS; j++)
        for (int k = 0; k < 4; k++) a[j][k] = (float)j;
    for (long i = 0; i < iters; i++)
#pragma GCC unroll CHAINS
        for (int j = 0; j < CHAINS; j++)
            for (int k = 0; k < 4; k++) a[j][k] = a[j][k] * 0.999f + 1e-3f;
    float s = 0.0f;
    for (int j = 0; j < CHAINS; j++)
        for (int k = 0; k < 4; k++) s += a[j][k];
    return s;
}

typedef float (*chains_fn)(long);

static chains_fn pick(const char **isa, int *lanes) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return *isa = "avx512", *lanes = 16, chains_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return *isa = "avx2+fma", *lanes = 8, chains_avx2;
#endif
    return *isa = "sse2", *lanes = 4, chains_plain;
}

fma_peak fma_peak_measure(int threads) {
    fma_peak r = {0.0, NULL};
    int lanes = 0;
    chains_fn fn = pick(&r.isa, &lanes);
    volatile float sink = 0.0f;
    for (int run = 0; run < RUNS; run++) {
        double t0 = now_s();
        float total = 0.0f;
#pragma omp parallel num_threads(threads) reduction(+ : total)
        total += fn(ITERS);
        double dt = now_s() - t0;
        sink += total;
        double gflops = (double)threads * ITERS * CHAINS * lanes * 2.0 / dt * 1e-9;
        if (gflops > r.gflops) r.gflops = gflops;
    }
    (void)sink;
    return r;
}
