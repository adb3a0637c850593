// Optimizer steps on fp32 parameters: kernel_math.h's element updates.
#include "cuda_common.cuh"

__global__ static void adamw_k(float *param, const float *grad, float *m, float *v, size_t n,
                               ds_km_adamw k) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ds_km_adamw1(&param[i], grad[i], &m[i], &v[i], &k);
}

__global__ static void sgd_k(float *param, const float *grad, float *buf, size_t n, float lr,
                             float momentum, float weight_decay) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        ds_km_sgd1(&param[i], grad[i], buf ? &buf[i] : NULL, lr, momentum, weight_decay);
}

extern "C" int ds_cuda_adamw_update_scaled(ds_cuda_ctx *ctx, float *param, const float *grad,
                                           float grad_scale, float *m, float *v, size_t n,
                                           float lr, float beta1, float beta2, float eps,
                                           float weight_decay, int t) {
    DS_CU_ARG(ctx, n == 0 || (param && grad && m && v));
    DS_CU_ARG(ctx, t >= 1);
    if (n == 0) return 0;
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    adamw_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(param, grad, m, v, n, k);
    DS_CU_LAUNCHED(ctx, "adamw");
    return 0;
}

extern "C" int ds_cuda_adamw_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *m,
                                    float *v, size_t n, float lr, float beta1, float beta2,
                                    float eps, float weight_decay, int t) {
    return ds_cuda_adamw_update_scaled(ctx, param, grad, 1.0f, m, v, n, lr, beta1, beta2, eps,
                                       weight_decay, t);
}

extern "C" int ds_cuda_sgd_update(ds_cuda_ctx *ctx, float *param, const float *grad, float *buf,
                                  size_t n, float lr, float momentum, float weight_decay) {
    DS_CU_ARG(ctx, n == 0 || (param && grad));
    DS_CU_ARG(ctx, momentum == 0.0f || buf);
    if (n == 0) return 0;
    sgd_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(param, grad, buf, n, lr, momentum,
                                                              weight_decay);
    DS_CU_LAUNCHED(ctx, "sgd");
    return 0;
}
