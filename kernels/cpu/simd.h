/* Helpers for the CPU kernels' hot loops.
 *
 * DS_SIMD compiles a function three times (AVX-512, AVX2+FMA, baseline x86-64-v2) and picks
 * one at load time, so the library runs on any x86-64 and uses what the CPU has. Put it
 * on small range workers, not on functions holding an OpenMP region: the outlined region
 * body is not cloned.
 *
 * The shared math in kernel_math.h is branch-free, so loops calling it vectorise. Reductions
 * use DS_LANES independent partial sums combined in a fixed order: vectorisable without
 * -ffast-math, and the same bits on every call.
 *
 * Parallel loops hand out fixed units of work (rows, heads, chunks) whose arithmetic does
 * not depend on the thread that runs them, and any sum across units is taken afterwards
 * in unit order. So the heavy loops can use schedule(dynamic): on a busy machine a thread
 * the OS preempts does not hold the others up, and the bits stay the same. */
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

/* Below about this many element operations (~0.1-0.2 ms on one core) a kernel runs on
 * one thread: a parallel region ends in a barrier, and when another process holds the
 * other core the barrier waits for a scheduler slice (4-8 ms measured here), far more
 * than the split saves. */
#define DS_PAR_MIN 262144

#endif
