// Arithmetic on 16-bit arrays (kernels.h's ds_half_*): each element widened with
// kernel_math.h's converters, computed in fp32, rounded back once (round to nearest
// even), as the CPU kernels do: elementwise results have the CPU's bits.
#include "cuda_common.cuh"
#include "half_math.cuh"

__global__ static void acc_f32_k(ds_half h, uint16_t *acc, const float *x, size_t n) {
    GRID_STRIDE(i, n) acc[i] = ds_cu_narrow(h, ds_cu_widen(h, acc[i]) + x[i]);
}
__global__ static void add_k(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b,
                             size_t n) {
    GRID_STRIDE(i, n) out[i] = ds_cu_narrow(h, ds_cu_widen(h, a[i]) + ds_cu_widen(h, b[i]));
}
__global__ static void scale_k(ds_half h, uint16_t *x, float k, size_t n) {
    GRID_STRIDE(i, n) x[i] = ds_cu_narrow(h, ds_cu_widen(h, x[i]) * k);
}

extern "C" int ds_cuda_half_from_f32(ds_cuda_ctx *ctx, ds_half h, uint16_t *dst, const float *src,
                                     size_t n) {
    return h == DS_HALF_BF16 ? ds_cuda_f32_to_bf16(ctx, dst, src, n) : ds_cuda_f32_to_f16(ctx, dst, src, n);
}

extern "C" int ds_cuda_half_to_f32(ds_cuda_ctx *ctx, ds_half h, float *dst, const uint16_t *src,
                                   size_t n) {
    return h == DS_HALF_BF16 ? ds_cuda_bf16_to_f32(ctx, dst, src, n) : ds_cuda_f16_to_f32(ctx, dst, src, n);
}

extern "C" int ds_cuda_half_acc_f32(ds_cuda_ctx *ctx, ds_half h, uint16_t *acc, const float *x,
                                    size_t n) {
    DS_CU_ARG(ctx, n == 0 || (acc && x));
    DS_CU_LAUNCH_N(ctx, "half acc f32", acc_f32_k, n, h, acc, x, n);
}

extern "C" int ds_cuda_half_add(ds_cuda_ctx *ctx, ds_half h, uint16_t *out, const uint16_t *a,
                                const uint16_t *b, size_t n) {
    DS_CU_ARG(ctx, n == 0 || (out && a && b));
    DS_CU_LAUNCH_N(ctx, "half add", add_k, n, h, out, a, b, n);
}

extern "C" int ds_cuda_half_scale(ds_cuda_ctx *ctx, ds_half h, uint16_t *x, float k, size_t n) {
    DS_CU_ARG(ctx, n == 0 || x);
    DS_CU_LAUNCH_N(ctx, "half scale", scale_k, n, h, x, k, n);
}
