/* Helpers for the CPU kernels' hot loops.
 *
 * DS_SIMD compiles a function three times (AVX-512, AVX2+FMA, baseline x86-64-v2) and picks
 * one at load time, so the library runs on any x86-64 and uses what the CPU has. Put it
 * on small range workers, not on functions holding an OpenMP region: the outlined region
 * body is not cloned.
 *
 * The shared math in kernel_math.h is branch-free, so loops calling it vectorise. Reductions
 * use DS_LANES independent partial sums combined in a fixed order: vectorisable without
 * -ffast-math, and the same bits on every call. */
#ifndef DS_CPU_SIMD_H
#define DS_CPU_SIMD_H

#include <stdint.h>
#include <string.h>

#include "kernel_math.h" /* the per-element math, shared with the CUDA kernels */

#if defined(__x86_64__) && !defined(__clang__)
#define DS_SIMD __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DS_SIMD
#endif

#define DS_LANES 16

#endif
