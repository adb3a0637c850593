// The cuda device's kernel table (kernel_table.h): every entry is a ds_cuda_* kernel on
// the process's cuda device's compute stream. The entries return nothing, so a kernel
// that cannot be queued (a bad argument, a launch failure, a cuBLAS status) becomes the
// device's sticky error: the next sync, to_host or event_sync reports it, as it reports
// a kernel's fault.
#include "cuda_device.cuh"

static ds_cuda_ctx *ctx_of(void) { return ds_cu_the_device->ctx; }

static void check(int rc, const char *what) {
    if (rc != 0) ds_cu_device_fail(ds_cu_the_device, "%s: %s", what, ds_cuda_ctx_error(ctx_of()));
}

#define RUN(what, call) check((call), what)

// ---- dense, elementwise, normalisation, embedding ------------------------------------
static void matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC) {
    RUN("matmul_forward", ds_cuda_matmul_forward(ctx_of(), out, inp, weight, bias, N, C, OC));
}
static void matmul_backward(float *dinp, int acc, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC) {
    RUN("matmul_backward",
        ds_cuda_matmul_backward(ctx_of(), dinp, acc, dweight, dbias, dout, inp, weight, N, C, OC));
}
static void matmul16_forward(ds_half h, void *out, const void *inp, int io16,
                             const uint16_t *weight, const uint16_t *bias, int N, int C, int OC,
                             void *ws) {
    RUN("matmul16_forward",
        ds_cuda_matmul16_forward(ctx_of(), h, out, inp, io16, weight, bias, N, C, OC, ws));
}
static void matmul16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight, uint16_t *dbias,
                              const void *dout, const void *inp, int io16, const uint16_t *weight,
                              int N, int C, int OC, void *ws) {
    RUN("matmul16_backward", ds_cuda_matmul16_backward(ctx_of(), h, dinp, acc, dweight, dbias, dout,
                                                       inp, io16, weight, N, C, OC, ws));
}
static void add_forward(float *out, const float *a, const float *b, size_t n) {
    RUN("add_forward", ds_cuda_add_forward(ctx_of(), out, a, b, n));
}
static void accumulate(float *dst, const float *src, size_t n) {
    RUN("accumulate", ds_cuda_accumulate(ctx_of(), dst, src, n));
}
static void scale(float *x, float s, size_t n) { RUN("scale", ds_cuda_scale(ctx_of(), x, s, n)); }
static void gelu_forward(float *out, const float *inp, size_t n) {
    RUN("gelu_forward", ds_cuda_gelu_forward(ctx_of(), out, inp, n));
}
static void gelu_backward(float *dinp, int acc, const float *inp, const float *dout, size_t n) {
    RUN("gelu_backward", ds_cuda_gelu_backward(ctx_of(), dinp, acc, inp, dout, n));
}
static void gelu16_forward(ds_half h, void *out, const void *inp, size_t n, int in16,
                           int out16) {
    RUN("gelu16_forward", ds_cuda_gelu16_forward(ctx_of(), h, out, inp, n, in16, out16));
}
static void gelu16_backward(ds_half h, void *dinp, int acc, const uint16_t *inp, const float *dout,
                            size_t n, int din16) {
    RUN("gelu16_backward", ds_cuda_gelu16_backward(ctx_of(), h, dinp, acc, inp, dout, n, din16));
}
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C, float eps) {
    RUN("layernorm_forward",
        ds_cuda_layernorm_forward(ctx_of(), out, mean, rstd, inp, weight, bias, N, C, eps));
}
static void layernorm_backward(float *dinp, int acc, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C) {
    RUN("layernorm_backward", ds_cuda_layernorm_backward(ctx_of(), dinp, acc, dweight, dbias, dout,
                                                         inp, weight, mean, rstd, N, C));
}
static void embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C) {
    RUN("embedding_forward", ds_cuda_embedding_forward(ctx_of(), out, ids, table, N, C));
}
static void embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
    RUN("embedding_backward", ds_cuda_embedding_backward(ctx_of(), dtable, dout, ids, N, C));
}
static void embedding16_forward(ds_half h, float *out, const int32_t *ids,
                               const uint16_t *table, int N, int C) {
    RUN("embedding16_forward", ds_cuda_embedding16_forward(ctx_of(), h, out, ids, table, N, C));
}
static void embedding16_backward(ds_half h, uint16_t *dtable, const float *dout,
                                const int32_t *ids, int N, int C, void *ws) {
    (void)ws; /* the sort runs in the context's scratch, as embedding_backward's */
    RUN("embedding16_backward",
        ds_cuda_embedding16_backward(ctx_of(), h, dtable, dout, ids, N, C));
}
static void posemb16_forward(ds_half h, float *out, const float *inp, const uint16_t *table,
                             int B, int T, int C) {
    RUN("posemb16_forward", ds_cuda_posemb16_forward(ctx_of(), h, out, inp, table, B, T, C));
}
static void posemb16_backward(ds_half h, uint16_t *dtable, const float *dout, int B, int T,
                              int C) {
    RUN("posemb16_backward", ds_cuda_posemb16_backward(ctx_of(), h, dtable, dout, B, T, C));
}
static void layernorm16_forward(ds_half h, void *out, float *mean, float *rstd,
                                const float *inp, const uint16_t *weight, const uint16_t *bias,
                                int N, int C, float eps, int out16, void *ws) {
    (void)ws; /* the 16-bit weight and bias are read as they are */
    RUN("layernorm16_forward", ds_cuda_layernorm16_forward(ctx_of(), h, out, mean, rstd, inp,
                                                           weight, bias, N, C, eps, out16));
}
static void layernorm16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                 uint16_t *dbias, const float *dout, const float *inp,
                                 const uint16_t *weight, const float *mean, const float *rstd,
                                 int N, int C, void *ws) {
    RUN("layernorm16_backward",
        ds_cuda_layernorm16_backward(ctx_of(), h, dinp, acc, dweight, dbias, dout, inp, weight,
                                     mean, rstd, N, C, ws));
}

// ---- attention -------------------------------------------------------------------------
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
    RUN("attention_forward", ds_cuda_attention_forward(ctx_of(), out, att, qkv, B, T, C, NH));
}
static void attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                               const float *qkv, const float *att, int B, int T, int C, int NH) {
    RUN("attention_backward",
        ds_cuda_attention_backward(ctx_of(), dqkv, acc, scratch, dout, qkv, att, B, T, C, NH));
}
static void attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T,
                                      int C, int NH, float p, ds_rng_key key) {
    RUN("attention_forward_dropout",
        ds_cuda_attention_forward_dropout(ctx_of(), out, att, qkv, B, T, C, NH, p, key));
}
static void attention_backward_dropout(float *dqkv, int acc, float *scratch, const float *dout,
                                       const float *qkv, const float *att, int B, int T, int C,
                                       int NH, float p, ds_rng_key key) {
    RUN("attention_backward_dropout",
        ds_cuda_attention_backward_dropout(ctx_of(), dqkv, acc, scratch, dout, qkv, att, B, T, C,
                                           NH, p, key));
}

// head sizes up to 128 (attention_flash.cu); a larger one is the device's error, naming it
static void attention_forward_fused(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH, float p, ds_rng_key key) {
    RUN("attention_forward_fused",
        ds_cuda_flash_attention_forward(ctx_of(), out, lse, qkv, B, T, C, NH, p, key));
}
static void attention_backward_fused(float *dqkv, int acc, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, float p, ds_rng_key key) {
    RUN("attention_backward_fused",
        ds_cuda_flash_attention_backward(ctx_of(), dqkv, acc, scratch, dout, qkv, out, lse, B, T, C,
                                         NH, p, key));
}

// 16-bit qkv and out read and written as they are (DS_ATTN16_HALF: no workspace)
static void attention16_forward_fused(ds_half h, void *out, float *lse, const void *qkv, int B,
                                      int T, int C, int NH, float p, ds_rng_key key, int in16,
                                      int out16, void *ws) {
    (void)ws;
    RUN("attention16_forward_fused",
        ds_cuda_flash_attention16_forward(ctx_of(), h, out, lse, qkv, B, T, C, NH, p, key, in16,
                                          out16));
}
static void attention16_backward_fused(ds_half h, void *dqkv, int acc, float *scratch,
                                       const float *dout, const void *qkv, const void *out,
                                       const float *lse, int B, int T, int C, int NH, float p,
                                       ds_rng_key key, int in16, int out16, int din16, void *ws) {
    (void)ws;
    RUN("attention16_backward_fused",
        ds_cuda_flash_attention16_backward(ctx_of(), h, dqkv, acc, scratch, dout, qkv, out, lse, B,
                                           T, C, NH, p, key, in16, out16, din16));
}

// ---- loss ------------------------------------------------------------------------------
static void crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                                 int N, int V, double *sum) {
    ds_cuda_ctx *cx = ctx_of();
    int rc = ds_cuda_crossentropy_forward(cx, losses, logits, targets, N, V, NULL);
    if (rc == 0 && sum) rc = ds_cuda_sum(cx, losses, (size_t)N, sum);
    check(rc, "crossentropy_forward");
}
static void crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                                  float dloss, int N, int V) {
    RUN("crossentropy_backward",
        ds_cuda_crossentropy_backward(ctx_of(), dlogits, logits, targets, dloss, N, V));
}
static void crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                          const int32_t *targets, float dloss, int N, int V,
                                          double *sum) {
    ds_cuda_ctx *cx = ctx_of();
    int rc = ds_cuda_crossentropy_forward_backward(cx, losses, dlogits, logits, targets, dloss,
                                                   N, V, NULL);
    if (rc == 0 && sum) rc = ds_cuda_sum(cx, losses, (size_t)N, sum);
    check(rc, "crossentropy_forward_backward");
}

static void crossentropy16(ds_half h, float *losses, uint16_t *dlogits, const uint16_t *logits,
                           const int32_t *targets, float dloss, int N, int V, double *sum) {
    ds_cuda_ctx *cx = ctx_of();
    int rc = ds_cuda_crossentropy16(cx, h, losses, dlogits, logits, targets, dloss, N, V);
    if (rc == 0 && sum && losses) rc = ds_cuda_sum(cx, losses, (size_t)N, sum);
    check(rc, "crossentropy16");
}

// ---- dropout, optimizers ---------------------------------------------------------------
static void dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key) {
    RUN("dropout_forward", ds_cuda_dropout_forward(ctx_of(), out, inp, n, p, key));
}
static void dropout_backward(float *dinp, int acc, const float *dout, size_t n, float p,
                             ds_rng_key key) {
    RUN("dropout_backward", ds_cuda_dropout_backward(ctx_of(), dinp, acc, dout, n, p, key));
}
static void dropout_add_forward(float *out, const float *x, const float *f, size_t n, float p,
                                ds_rng_key key) {
    RUN("dropout_add_forward", ds_cuda_dropout_add_forward(ctx_of(), out, x, f, n, p, key));
}
static void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t) {
    RUN("adamw_update", ds_cuda_adamw_update(ctx_of(), param, grad, m, v, n, lr, beta1, beta2,
                                             eps, weight_decay, t));
}
static void adamw_spans(float *param, const float *grad, float grad_scale, float *m, float *v,
                        const ds_decay_span *spans, int nspans, float lr, float beta1,
                        float beta2, float eps, int t) {
    RUN("adamw_spans", ds_cuda_adamw_spans(ctx_of(), -1, param, grad, grad_scale, NULL, m, v,
                                           spans, nspans, lr, beta1, beta2, eps, t));
}
static void sgd_update(float *param, const float *grad, float *buf, size_t n, float lr,
                       float momentum, float weight_decay) {
    RUN("sgd_update",
        ds_cuda_sgd_update(ctx_of(), param, grad, buf, n, lr, momentum, weight_decay));
}
static void sumsq(const float *x, size_t n, double *out) {
    RUN("sumsq", ds_cuda_sumsq(ctx_of(), x, n, out));
}

// ---- 16-bit working copies -------------------------------------------------------------
static void half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n) {
    RUN("half_from_f32", ds_cuda_half_from_f32(ctx_of(), h, dst, src, n));
}
static void half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n) {
    RUN("half_to_f32", ds_cuda_half_to_f32(ctx_of(), h, dst, src, n));
}
static void half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n) {
    RUN("half_acc_f32", ds_cuda_half_acc_f32(ctx_of(), h, acc, x, n));
}
static void half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    RUN("half_add", ds_cuda_half_add(ctx_of(), h, out, a, b, n));
}
static void half_scale(ds_half h, uint16_t *x, float k, size_t n) {
    RUN("half_scale", ds_cuda_half_scale(ctx_of(), h, x, k, n));
}
static void half_sumsq(ds_half h, const uint16_t *x, size_t n, double *out) {
    RUN("half_sumsq", ds_cuda_half_sumsq(ctx_of(), h, x, n, out));
}
static void adamw_half_spans(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                             float *master, float *m, float *v, const ds_decay_span *spans,
                             int nspans, float lr, float beta1, float beta2, float eps, int t) {
    RUN("adamw_half_spans", ds_cuda_adamw_spans(ctx_of(), (int)h, w, grad, grad_scale, master, m,
                                                v, spans, nspans, lr, beta1, beta2, eps, t));
}
static void sgd_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                            float *master, float *buf, size_t n, float lr, float momentum,
                            float weight_decay) {
    RUN("sgd_update_half", ds_cuda_sgd_update_half(ctx_of(), h, w, grad, grad_scale, master, buf,
                                                   n, lr, momentum, weight_decay));
}

// in kernel_table.h's order (C++ has no designated initialisers out of order)
extern "C" const ds_kernel_table ds_cuda_kernels = {
    matmul_forward,
    matmul_backward,
    matmul16_forward,
    matmul16_backward,
    add_forward,
    accumulate,
    scale,
    gelu_forward,
    gelu_backward,
    gelu16_forward,
    gelu16_backward,
    layernorm_forward,
    layernorm_backward,
    embedding_forward,
    embedding_backward,
    embedding16_forward,
    embedding16_backward,
    posemb16_forward,
    posemb16_backward,
    layernorm16_forward,
    layernorm16_backward,
    attention_forward,
    attention_backward,
    attention_forward_dropout,
    attention_backward_dropout,
    attention_forward_fused,
    attention_backward_fused,
    attention16_forward_fused,
    attention16_backward_fused,
    crossentropy_forward,
    crossentropy_backward,
    crossentropy_forward_backward,
    crossentropy16,
    dropout_forward,
    dropout_backward,
    dropout_add_forward,
    adamw_update,
    adamw_spans,
    sgd_update,
    sumsq,
    half_from_f32,
    half_to_f32,
    half_acc_f32,
    half_add,
    half_scale,
    half_sumsq,
    adamw_half_spans,
    sgd_update_half,
};

// a table grown in kernel_table.h must grow here too (C++17: positional initialisers)
static_assert(sizeof(ds_kernel_table) == 48 * sizeof(void (*)(void)),
              "kernel_table.h has entries ds_cuda_kernels lacks");
