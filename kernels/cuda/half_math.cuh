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

static inline ds_cu_act ds_cu_f32(const float *p) { return ds_cu_act{(void *)p, 0, DS_HALF_BF16}; }
static inline ds_cu_act ds_cu_act_of(const void *p, int is16, ds_half h) {
    return ds_cu_act{(void *)p, is16, h};
}

#endif
