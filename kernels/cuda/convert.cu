// fp32 <-> bf16 / fp16 with kernel_math.h's rounding: the same bits as the CPU kernels
// (the hardware converters would differ for NaN payloads only, but one definition is
// simpler to trust).
#include "cuda_common.cuh"

__global__ static void to_bf16_k(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = ds_km_f32_to_bf16(src[i]);
}
__global__ static void from_bf16_k(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = ds_km_bf16_to_f32(src[i]);
}
__global__ static void to_f16_k(uint16_t *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = ds_km_f32_to_f16(src[i]);
}
__global__ static void from_f16_k(float *dst, const uint16_t *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] = ds_km_f16_to_f32(src[i]);
}

#define CONVERT(ctx, name, kernel, dst, src, n)                                            \
    do {                                                                                   \
        DS_CU_ARG(ctx, (n) == 0 || ((dst) && (src)));                                      \
        if ((n) == 0) return 0;                                                            \
        kernel<<<ds_cu_blocks(n), DS_CU_THREADS, 0, (ctx)->stream>>>(dst, src, n);         \
        DS_CU_LAUNCHED(ctx, name);                                                         \
        return 0;                                                                          \
    } while (0)

extern "C" int ds_cuda_f32_to_bf16(ds_cuda_ctx *ctx, uint16_t *dst, const float *src, size_t n) {
    CONVERT(ctx, "f32 to bf16", to_bf16_k, dst, src, n);
}
extern "C" int ds_cuda_bf16_to_f32(ds_cuda_ctx *ctx, float *dst, const uint16_t *src, size_t n) {
    CONVERT(ctx, "bf16 to f32", from_bf16_k, dst, src, n);
}
extern "C" int ds_cuda_f32_to_f16(ds_cuda_ctx *ctx, uint16_t *dst, const float *src, size_t n) {
    CONVERT(ctx, "f32 to f16", to_f16_k, dst, src, n);
}
extern "C" int ds_cuda_f16_to_f32(ds_cuda_ctx *ctx, float *dst, const uint16_t *src, size_t n) {
    CONVERT(ctx, "f16 to f32", from_f16_k, dst, src, n);
}
