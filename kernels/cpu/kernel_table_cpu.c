/* The CPU kernels as a device's kernel table: kernels.h's functions, with one-line
 * adapters where kernels.h returns a sum (the table writes it to a double the caller
 * reads, which on the CPU is host memory). */
#include "kernel_table.h"

static void xent_forward(float *losses, const float *logits, const int32_t *targets, int N,
                         int V, double *sum) {
    *sum = ds_crossentropy_forward(losses, logits, targets, N, V);
}

static void xent_forward_backward(float *losses, float *dlogits, const float *logits,
                                  const int32_t *targets, float dloss, int N, int V, double *sum) {
    *sum = ds_crossentropy_forward_backward(losses, dlogits, logits, targets, dloss, N, V);
}

static void xent16(ds_half h, float *losses, uint16_t *dlogits, const uint16_t *logits,
                   const int32_t *targets, float dloss, int N, int V, double *sum) {
    double total = ds_crossentropy16(h, losses, dlogits, logits, targets, dloss, N, V);
    if (sum) *sum = total;
}

/* the CPU recomputes from qkv and lse alone (attention_fused.c) */
static void attention_backward_fused(float *dqkv, int acc, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, float p, ds_rng_key key) {
    (void)scratch, (void)out;
    ds_attention_backward_fused(dqkv, acc, dout, qkv, lse, B, T, C, NH, p, key);
}

static void attention16_backward_fused(ds_half h, void *dqkv, int acc, float *scratch,
                                       const float *dout, const void *qkv, const void *out,
                                       const float *lse, int B, int T, int C, int NH, float p,
                                       ds_rng_key key, int in16, int out16, int din16, void *ws) {
    (void)scratch, (void)out, (void)out16;
    ds_attention16_backward_fused(h, dqkv, acc, dout, qkv, lse, B, T, C, NH, p, key, in16, din16,
                                  ws);
}

static void sumsq(const float *x, size_t n, double *out) { *out = ds_sumsq(x, n); }

static void half_sumsq(ds_half h, const uint16_t *x, size_t n, double *out) {
    *out = ds_half_sumsq(h, x, n);
}

const ds_kernel_table ds_cpu_kernels = {
    .matmul_forward = ds_matmul_forward,
    .matmul_backward = ds_matmul_backward,
    .matmul16_forward = ds_matmul16_forward,
    .matmul16_backward = ds_matmul16_backward,
    .add_forward = ds_add_forward,
    .accumulate = ds_accumulate,
    .scale = ds_scale,
    .gelu_forward = ds_gelu_forward,
    .gelu_backward = ds_gelu_backward,
    .gelu16_forward = ds_gelu16_forward,
    .gelu16_backward = ds_gelu16_backward,
    .layernorm_forward = ds_layernorm_forward,
    .layernorm_backward = ds_layernorm_backward,
    .embedding_forward = ds_embedding_forward,
    .embedding_backward = ds_embedding_backward,
    .embedding16_forward = ds_embedding16_forward,
    .embedding16_backward = ds_embedding16_backward,
    .posemb16_forward = ds_posemb16_forward,
    .posemb16_backward = ds_posemb16_backward,
    .layernorm16_forward = ds_layernorm16_forward,
    .layernorm16_backward = ds_layernorm16_backward,
    .attention_forward = ds_attention_forward,
    .attention_backward = ds_attention_backward,
    .attention_forward_dropout = ds_attention_forward_dropout,
    .attention_backward_dropout = ds_attention_backward_dropout,
    .attention_forward_fused = ds_attention_forward_fused,
    .attention_backward_fused = attention_backward_fused,
    .attention16_forward_fused = ds_attention16_forward_fused,
    .attention16_backward_fused = attention16_backward_fused,
    .crossentropy_forward = xent_forward,
    .crossentropy_backward = ds_crossentropy_backward,
    .crossentropy_forward_backward = xent_forward_backward,
    .crossentropy16 = xent16,
    .dropout_forward = ds_dropout_forward,
    .dropout_backward = ds_dropout_backward,
    .dropout_add_forward = ds_dropout_add_forward,
    .adamw_update = ds_adamw_update,
    .adamw_spans = ds_adamw_spans,
    .sgd_update = ds_sgd_update,
    .sumsq = sumsq,
    .half_from_f32 = ds_half_from_f32,
    .half_to_f32 = ds_half_to_f32,
    .half_acc_f32 = ds_half_acc_f32,
    .half_add = ds_half_add,
    .half_scale = ds_half_scale,
    .half_sumsq = half_sumsq,
    .adamw_half_spans = ds_adamw_half_spans,
    .sgd_update_half = ds_sgd_update_half,
};
