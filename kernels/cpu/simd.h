/* Helpers for the CPU kernels' hot loops.
 *
 * DS_SIMD compiles a function three times (AVX-512, AVX2+FMA, baseline x86-64-v2) and picks
 * one at load time, so the library runs on any x86-64 and uses what the CPU has. Put it
 * on small range workers, not on functions holding an OpenMP region: the outlined region
 * body is not cloned.
 *
 * The math below is branch-free so the compiler vectorises loops that call it. Reductions
 * use DS_LANES independent partial sums combined in a fixed order: vectorisable without
 * -ffast-math, and the same bits on every call. */
#ifndef DS_CPU_SIMD_H
#define DS_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && !defined(__clang__)
#define DS_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DS_SIMD
#endif

#define DS_LANES 16

/* exp(x) with ~2 ulp error for x in [-87.3, 88.7]; 0 below, clamped above. Range
 * reduction x = n*ln2 + r and Cephes' minimax polynomial for exp(r) on |r| <= ln2/2. */
static inline float ds_expf(float x) {
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
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x < -87.33654475f ? 0.0f : y;
}

#endif
