// bf16 / fp16 elements as raw bits (ds_half), widened and rounded with kernel_math.h's
// converters: the CPU kernels' bits.
#ifndef DS_CUDA_HALF_MATH_CUH
#define DS_CUDA_HALF_MATH_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda_common.cuh" /* ds_cu_grad */
#include "kernel_math.h"

extern "C" {
#include "kernels.h" /* ds_half */
}

__device__ inline float ds_cu_widen(ds_half h, uint16_t x) {
    return h == DS_HALF_BF16 ? ds_km_bf16_to_f32(x) : ds_km_f16_to_f32(x);
}

__device__ inline uint16_t ds_cu_narrow(ds_half h, float x) {
    return h == DS_HALF_BF16 ? ds_km_f32_to_bf16(x) : ds_km_f32_to_f16(x);
}

// An activation array of fp32 elements, or of 16-bit ones of format h (is16): widened
// where it is read, rounded once where it is written, so a kernel taking one reads and
// writes either type with fp32 arithmetic in between. The branch is uniform over a
// launch.
struct ds_cu_act {
    void *p;
    int is16;
    ds_half h;
    __device__ float load(size_t i) const {
        return is16 ? ds_cu_widen(h, ((const uint16_t *)p)[i]) : ((const float *)p)[i];
    }
    __device__ void store(size_t i, float v) const {
        if (is16) ((uint16_t *)p)[i] = ds_cu_narrow(h, v);
        else ((float *)p)[i] = v;
    }
};

// An element type fixed at compile time, for a kernel whose hot loops read an activation
// (the flash attention's qkv tiles): ds_cu_act's runtime branch there cost registers the
// kernels do not have (sm_90, -Xptxas -v: flash_dkv_k<64> spilled 1,268 bytes with it,
// 428 as in fp32 without it). Widened by the hardware's conversions, exact as
// ds_cu_widen's (the same value for every input but a NaN's payload), without the
// software fp16 path's branches for subnormals, which alone cost flash_dkv_k<64> 412
// bytes more spills (and the shifts of bf16's cost flash_dq_k<128> 1,232).
struct ds_cu_e32 {
    __device__ static float load(const void *p, size_t i) { return ((const float *)p)[i]; }
};
template <ds_half H> struct ds_cu_e16 {
    __device__ static float load(const void *p, size_t i) {
        uint16_t x = ((const uint16_t *)p)[i];
        return H == DS_HALF_BF16 ? __bfloat162float(__ushort_as_bfloat16(x))
                                 : __half2float(__ushort_as_half(x));
    }
};

static inline ds_cu_act ds_cu_f32(const float *p) { return ds_cu_act{(void *)p, 0, DS_HALF_BF16}; }
static inline ds_cu_act ds_cu_act_of(const void *p, int is16, ds_half h) {
    return ds_cu_act{(void *)p, is16, h};
}
// An input gradient's element i: a 16-bit one written, v rounded once (kernel_table.h:
// acc is not read then); an fp32 one written or added to as acc says (ds_cu_grad's rule).
__device__ inline void ds_cu_grad_act(const ds_cu_act &d, size_t i, float v, int acc) {
    if (d.is16) d.store(i, v);
    else ds_cu_grad((float *)d.p + i, v, acc);
}

#endif
