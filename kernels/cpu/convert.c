/* fp32 <-> bf16 / fp16 conversion, round to nearest even. NaNs stay NaN (quiet, top
 * payload bits kept, like the hardware converters); overflow rounds to infinity; fp16
 * denormals are produced and read exactly. The compiler does not vectorise the fp16
 * scalar code, so where the CPU has F16C, blocks of 8 go through the hardware converter,
 * which rounds the same way (RNE under the default MXCSR). The scalar rounding is
 * kernel_math.h's, shared with the CUDA kernels. */
#include <string.h>

#include "kernels.h"
#include "simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_F16C_PATH 1

__attribute__((target("avx,f16c"))) static size_t f32_to_f16_f16c(uint16_t *dst,
                                                                   const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), h);
    }
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f16_to_f32_f16c(float *dst,
                                                                   const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    return i;
}

/* cpuid rather than __builtin_cpu_supports, which not every compiler knows "f16c" by;
 * AVX also needs the OS to save YMM state (XCR0 bits 1 and 2). */
static int have_f16c(void) {
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v < 0) {
        unsigned a, b, c, d;
        v = 0;
        if (__get_cpuid(1, &a, &b, &c, &d) && (c & bit_OSXSAVE) && (c & bit_AVX) &&
            (c & bit_F16C)) {
            unsigned lo, hi;
            __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            v = (lo & 6u) == 6u;
        }
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}
#endif

DS_SIMD void ds_f32_to_bf16(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ds_km_f32_to_bf16(src[i]);
}

DS_SIMD void ds_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ds_km_bf16_to_f32(src[i]);
}

void ds_f32_to_f16(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
#ifdef HAVE_F16C_PATH
    if (have_f16c()) i = f32_to_f16_f16c(dst, src, n);
#endif
    for (; i < n; i++) dst[i] = ds_km_f32_to_f16(src[i]);
}

void ds_f16_to_f32(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
#ifdef HAVE_F16C_PATH
    if (have_f16c()) i = f16_to_f32_f16c(dst, src, n);
#endif
    for (; i < n; i++) dst[i] = ds_km_f16_to_f32(src[i]);
}
