// Optimizer steps on 16-bit working copies (kernels.h's ds_adamw_update_half and
// ds_sgd_update_half): fp32 masters and moments, grad * grad_scale widened to fp32, the
// step of kernel_math.h, and the working copy rounded from the new master in the same
// pass. And the fused AdamW of a training step: the gradient unscale and the clip
// factor computed on the device from the squared norm the step already has there, the
// update skipped when that norm is not finite (fp16 overflow): no number goes to the
// host and back between the norm and the update.
#include <math.h>

#include "cuda_common.cuh"
#include "half_math.cuh"

__global__ static void adamw_half_k(ds_half h, uint16_t *w, const uint16_t *grad, float *master,
                                    float *m, float *v, size_t n, ds_km_adamw k) {
    GRID_STRIDE(i, n) {
        float p = master[i], mi = m[i], vi = v[i];
        ds_km_adamw1(&p, ds_cu_widen(h, grad[i]), &mi, &vi, &k);
        master[i] = p, m[i] = mi, v[i] = vi;
        w[i] = ds_cu_narrow(h, p);
    }
}

// grad * grad_scale is rounded to fp32 before the step, as the CPU kernel does it
__global__ static void sgd_half_k(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                                  float *master, float *buf, size_t n, float lr, float momentum,
                                  float weight_decay) {
    GRID_STRIDE(i, n) {
        float p = master[i];
        float g = ds_cu_widen(h, grad[i]);
        if (grad_scale != 1.0f) g *= grad_scale;
        if (buf) {
            float b = buf[i];
            ds_km_sgd1(&p, g, &b, lr, momentum, weight_decay);
            buf[i] = b;
        } else {
            ds_km_sgd1(&p, g, NULL, lr, 0.0f, weight_decay);
        }
        master[i] = p;
        w[i] = ds_cu_narrow(h, p);
    }
}

extern "C" int ds_cuda_adamw_update_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *w,
                                         const uint16_t *grad, float grad_scale, float *master,
                                         float *m, float *v, size_t n, float lr, float beta1,
                                         float beta2, float eps, float weight_decay, int t) {
    DS_CU_ARG(ctx, n == 0 || (w && grad && master && m && v));
    DS_CU_ARG(ctx, t >= 1);
    if (n == 0) return 0;
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    adamw_half_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(h, w, grad, master, m, v, n, k);
    DS_CU_LAUNCHED(ctx, "adamw half");
    return 0;
}

extern "C" int ds_cuda_sgd_update_half(ds_cuda_ctx *ctx, ds_half h, uint16_t *w,
                                       const uint16_t *grad, float grad_scale, float *master,
                                       float *buf, size_t n, float lr, float momentum,
                                       float weight_decay) {
    DS_CU_ARG(ctx, n == 0 || (w && grad && master));
    DS_CU_ARG(ctx, momentum == 0.0f || buf);
    if (n == 0) return 0;
    sgd_half_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(
        h, w, grad, grad_scale, master, momentum != 0.0f ? buf : NULL, n, lr, momentum, weight_decay);
    DS_CU_LAUNCHED(ctx, "sgd half");
    return 0;
}

// ---- fused AdamW ---------------------------------------------------------------------

// The factor the gradients are multiplied by, from their squared norm (still scaled by
// the loss scale): ds.Model's train_step in double, so the bits are its: n = sqrt(ss) /
// loss_scale, clip = max_norm / (n + 1e-6) when max_norm > 0 and n > max_norm, else 1;
// grad_scale = clip / loss_scale. NaN when ss is not finite: the step is skipped.
__device__ static float fused_scale(const double *sumsq, double loss_scale, double max_norm) {
    double ss = *sumsq;
    if (!isfinite(ss)) return NAN;
    double norm = sqrt(ss) / loss_scale;
    double clip = max_norm > 0.0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    return (float)(clip / loss_scale);
}

// half < 0: w and grad are fp32 (w is the parameter, master unused); else 16-bit bits
__global__ static void adamw_fused_k(int half, void *w, const void *grad, const double *sumsq,
                                     double loss_scale, double max_norm, float *master, float *m,
                                     float *v, size_t n, ds_km_adamw k) {
    float gs = fused_scale(sumsq, loss_scale, max_norm);
    if (isnan(gs)) return; // overflow: nothing changes (uniform over the grid)
    k.gscale = gs;
    if (half < 0) {
        float *p = (float *)w;
        const float *g = (const float *)grad;
        GRID_STRIDE(i, n) ds_km_adamw1(&p[i], g[i], &m[i], &v[i], &k);
        return;
    }
    ds_half h = (ds_half)half;
    uint16_t *w16 = (uint16_t *)w;
    const uint16_t *g16 = (const uint16_t *)grad;
    GRID_STRIDE(i, n) {
        float p = master[i], mi = m[i], vi = v[i];
        ds_km_adamw1(&p, ds_cu_widen(h, g16[i]), &mi, &vi, &k);
        master[i] = p, m[i] = mi, v[i] = vi;
        w16[i] = ds_cu_narrow(h, p);
    }
}

extern "C" int ds_cuda_adamw_fused(ds_cuda_ctx *ctx, int half, void *w, const void *grad,
                                   const double *dev_sumsq, double loss_scale, double max_norm,
                                   float *master, float *m, float *v, size_t n, float lr,
                                   float beta1, float beta2, float eps, float weight_decay,
                                   int t) {
    DS_CU_ARG(ctx, half == -1 || half == DS_HALF_BF16 || half == DS_HALF_F16);
    DS_CU_ARG(ctx, n == 0 || (w && grad && m && v && dev_sumsq && (half < 0 || master)));
    DS_CU_ARG(ctx, t >= 1 && loss_scale > 0.0);
    if (n == 0) return 0;
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, weight_decay, 1.0f, t);
    adamw_fused_k<<<ds_cu_blocks(n), DS_CU_THREADS, 0, ctx->stream>>>(
        half, w, grad, dev_sumsq, loss_scale, max_norm, master, m, v, n, k);
    DS_CU_LAUNCHED(ctx, "adamw fused");
    return 0;
}
