// bf16 / fp16 elements as raw bits (ds_half), widened and rounded with kernel_math.h's
// converters: the CPU kernels' bits.
#ifndef DS_CUDA_HALF_MATH_CUH
#define DS_CUDA_HALF_MATH_CUH

#include <stdint.h>

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

#endif
