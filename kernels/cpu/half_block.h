/* One block of a 16-bit array widened to fp32 or rounded back, on the calling thread: for
 * loops already split over the threads (half.c, optim.c). The public ds_half_to_f32 and
 * ds_half_from_f32 open a parallel region of their own, which a thread of another region
 * would pay for on every block. */
#ifndef DS_CPU_HALF_BLOCK_H
#define DS_CPU_HALF_BLOCK_H

#include "kernels.h"

static inline void ds_half_widen(ds_half h, float *dst, const uint16_t *src, size_t n) {
    if (h == DS_HALF_BF16) ds_bf16_to_f32(dst, src, n);
    else ds_f16_to_f32(dst, src, n);
}

static inline void ds_half_narrow(ds_half h, uint16_t *dst, const float *src, size_t n) {
    if (h == DS_HALF_BF16) ds_f32_to_bf16(dst, src, n);
    else ds_f32_to_f16(dst, src, n);
}

#endif
