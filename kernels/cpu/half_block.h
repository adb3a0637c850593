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

/* acc[i] = round16(acc[i] + x[i]): the sum in fp32, one rounding per element */
static inline void ds_half_acc_block(ds_half h, uint16_t *acc, const float *x, size_t n) {
    enum { B = 512 };
    float a[B];
    for (size_t i = 0; i < n; i += B) {
        size_t m = n - i < B ? n - i : B;
        ds_half_widen(h, a, acc + i, m);
        for (size_t j = 0; j < m; j++) a[j] += x[i + j];
        ds_half_narrow(h, acc + i, a, m);
    }
}

#endif
