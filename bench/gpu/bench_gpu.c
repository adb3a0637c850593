/* bench_gpu: what the CUDA backend costs on GPT-2 124M's shapes.
 *   1. cuBLAS GEMM TFLOP/s on every GEMM of a training step (forward, dinp, dweight) in
 *      fp32 (what ds_cuda_matmul_* run by default), TF32 tensor cores, and bf16 inputs
 *      with fp32 output and accumulation (cublasGemmEx); one step's GEMM time at each.
 *   2. The time of each ds_cuda_* kernel per call (B x T tokens), with the 16-bit head
 *      (bf16 logits) at V = 50,257 and at llm.c's padded 50,304 (rows 16-byte aligned:
 *      forward D and backward d(logits) in place, against the odd V's 2-byte aligned D
 *      and chunk copies), the 16-bit cross-entropy, and the flash attention in fp32 and
 *      bf16.
 * Times are CUDA events around R back-to-back calls after one warm-up, best of 3.
 * Prints a table, then one JSON object per line per measured configuration.
 * Usage: bench_gpu [--B N] [--T N] [--reps N] [--only gemm|kernels] */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_gpu.h"
#include "kernel_table.h" /* DS_MM16_*, ds_matmul16_workspace */
#include "kernels_cuda.h"

enum { V = 50257, L = 12, NH = 12, C = 768 };

static ds_cuda_ctx *g_ctx;
static int g_reps = 10;

static void die(const char *what) {
    fprintf(stderr, "bench_gpu: %s: %s\n", what, ds_cuda_ctx_error(g_ctx));
    exit(1);
}
#define OK(call)                                                                           \
    do {                                                                                   \
        if ((call) != 0) die(#call);                                                       \
    } while (0)
#define CU(call)                                                                           \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "bench_gpu: %s: %s\n", #call, cudaGetErrorString(e_));         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static void *dalloc(size_t bytes) {
    void *p;
    OK(ds_cuda_malloc(g_ctx, &p, bytes));
    return p;
}

/* device buffer of n floats uniform in [-scale, scale), filled on the host */
static float *drand(size_t n, float scale) {
    float *h = malloc(n * sizeof *h);
    if (!h) {
        fprintf(stderr, "bench_gpu: out of host memory\n");
        exit(1);
    }
    uint32_t s = 12345u + (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        h[i] = scale * (2.0f * (float)(s >> 8) / 16777216.0f - 1.0f);
    }
    float *d = dalloc(n * sizeof *d);
    OK(ds_cuda_to_device(g_ctx, d, h, n * sizeof *d));
    free(h);
    return d;
}

/* ---- timing ------------------------------------------------------------------------ */
typedef void (*bench_fn)(void *arg);

/* milliseconds per call: best of 3 batches of g_reps calls */
static double time_ms(bench_fn fn, void *arg) {
    cudaEvent_t a, b;
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&b));
    cudaStream_t st = (cudaStream_t)ds_cuda_ctx_stream(g_ctx);
    fn(arg);
    OK(ds_cuda_sync(g_ctx));
    float best = 1e30f;
    for (int k = 0; k < 3; k++) {
        CU(cudaEventRecord(a, st));
        for (int r = 0; r < g_reps; r++) fn(arg);
        CU(cudaEventRecord(b, st));
        CU(cudaEventSynchronize(b));
        OK(ds_cuda_sync(g_ctx));
        float ms;
        CU(cudaEventElapsedTime(&ms, a, b));
        if (ms < best) best = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best / g_reps;
}

/* ---- 1. GEMMs ----------------------------------------------------------------------- */
typedef enum { P_FP32, P_TF32, P_BF16 } gemm_prec;
static const char *PREC_NAME[] = {"fp32", "tf32", "bf16"};

typedef struct gemm_arg {
    gemm_prec prec;
    cublasOperation_t ta, tb;
    int m, n, k;
    const void *A, *B;
    void *Cm;
    int lda, ldb, ldc;
} gemm_arg;

static void run_gemm(void *p) {
    gemm_arg *g = p;
    cublasHandle_t h = (cublasHandle_t)ds_cuda_ctx_cublas(g_ctx);
    float one = 1.0f, zero = 0.0f;
    cublasStatus_t s;
    if (g->prec == P_BF16)
        s = cublasGemmEx(h, g->ta, g->tb, g->m, g->n, g->k, &one, g->A, CUDA_R_16BF, g->lda,
                         g->B, CUDA_R_16BF, g->ldb, &zero, g->Cm, CUDA_R_32F, g->ldc,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    else
        s = cublasSgemm(h, g->ta, g->tb, g->m, g->n, g->k, &one, g->A, g->lda, g->B, g->ldb,
                        &zero, g->Cm, g->ldc);
    if (s != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "bench_gpu: cuBLAS GEMM failed (status %d)\n", (int)s);
        exit(1);
    }
}

typedef struct linear {
    const char *name;
    int in, out, per_step; /* per_step: how many such layers a step runs */
} linear;

static void bench_gemms(int N) {
    const linear lin[] = {{"qkv", C, 3 * C, L},     {"attproj", C, C, L}, {"fc", C, 4 * C, L},
                          {"fcproj", 4 * C, C, L}, {"lm_head", C, V, 1}};
    const char *pass[] = {"forward", "dinp", "dweight"};
    size_t maxw = (size_t)V * C, maxa = (size_t)N * V;
    /* operands big enough for any shape; bf16 ones are reinterpreted halves */
    float *A = drand(maxa > maxw ? maxa : maxw, 1.0f), *B = drand(maxa > maxw ? maxa : maxw, 1.0f);
    float *Cm = dalloc(maxa * sizeof(float) > maxw * sizeof(float) ? maxa * sizeof(float)
                                                                    : maxw * sizeof(float));
    uint16_t *Ah = dalloc((maxa > maxw ? maxa : maxw) * 2), *Bh = dalloc((maxa > maxw ? maxa : maxw) * 2);
    OK(ds_cuda_f32_to_bf16(g_ctx, Ah, A, maxa > maxw ? maxa : maxw));
    OK(ds_cuda_f32_to_bf16(g_ctx, Bh, B, maxa > maxw ? maxa : maxw));
    double step_ms[3] = {0, 0, 0}, step_flop = 0;
    printf("\ngpt2-124M GEMMs (N = %d tokens), TFLOP/s per precision\n", N);
    printf("%-8s %-8s %6s %6s %6s %10s %10s %10s\n", "layer", "pass", "M", "N", "K", "fp32",
           "tf32", "bf16");
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++)
        for (int p = 0; p < 3; p++) {
            /* column-major views, as ds_cuda_matmul_* issue them */
            gemm_arg g = {0};
            int I = lin[i].in, O = lin[i].out, M, NN, K;
            if (p == 0) { /* out^T[O,N] = W^T' * inp^T */
                g.ta = CUBLAS_OP_T, g.tb = CUBLAS_OP_N, M = O, NN = N, K = I;
                g.lda = I, g.ldb = I, g.ldc = O;
            } else if (p == 1) { /* dinp^T[I,N] = W^T * dout^T */
                g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_N, M = I, NN = N, K = O;
                g.lda = I, g.ldb = O, g.ldc = I;
            } else { /* dW^T[I,O] = inp^T * dout */
                g.ta = CUBLAS_OP_N, g.tb = CUBLAS_OP_T, M = I, NN = O, K = N;
                g.lda = I, g.ldb = O, g.ldc = I;
            }
            g.m = M, g.n = NN, g.k = K;
            double flop = 2.0 * M * NN * K, tf[3];
            for (int q = 0; q < 3; q++) {
                g.prec = (gemm_prec)q;
                OK(ds_cuda_ctx_set_tf32(g_ctx, q == P_TF32)); /* bf16: default math */
                g.A = q == P_BF16 ? (const void *)Ah : (const void *)A;
                g.B = q == P_BF16 ? (const void *)Bh : (const void *)B;
                g.Cm = Cm;
                double ms = time_ms(run_gemm, &g);
                tf[q] = flop / (ms * 1e-3) / 1e12;
                step_ms[q] += ms * lin[i].per_step;
                printf("{\"bench\":\"gemm\",\"model\":\"gpt2-124M\",\"layer\":\"%s\",\"pass\":\"%s\","
                       "\"precision\":\"%s\",\"M\":%d,\"N\":%d,\"K\":%d,\"ms\":%.4f,\"tflop_per_s\":%.2f}\n",
                       lin[i].name, pass[p], PREC_NAME[q], M, NN, K, ms, tf[q]);
            }
            OK(ds_cuda_ctx_set_tf32(g_ctx, 0));
            step_flop += flop * lin[i].per_step;
            printf("%-8s %-8s %6d %6d %6d %10.1f %10.1f %10.1f\n", lin[i].name, pass[p], M, NN,
                   K, tf[0], tf[1], tf[2]);
        }
    for (int q = 0; q < 3; q++) {
        printf("one step's GEMMs (%.1f TFLOP) in %s: %.2f ms = %.1f TFLOP/s\n", step_flop / 1e12,
               PREC_NAME[q], step_ms[q], step_flop / (step_ms[q] * 1e-3) / 1e12);
        printf("{\"bench\":\"gemm_step\",\"model\":\"gpt2-124M\",\"precision\":\"%s\",\"tokens\":%d,"
               "\"tflop\":%.3f,\"ms\":%.3f,\"tflop_per_s\":%.2f}\n",
               PREC_NAME[q], N, step_flop / 1e12, step_ms[q], step_flop / (step_ms[q] * 1e-3) / 1e12);
    }
    ds_cuda_free(g_ctx, A), ds_cuda_free(g_ctx, B), ds_cuda_free(g_ctx, Cm);
    ds_cuda_free(g_ctx, Ah), ds_cuda_free(g_ctx, Bh);
}

/* ---- 2. the other kernels ------------------------------------------------------------ */
typedef struct kbufs {
    int B, T, N;
    float *x, *y, *dx, *w, *b, *dw, *db, *mean, *rstd;  /* [N, C] and [C] */
    float *h, *dh;                                      /* [N, 4C] */
    float *qkv, *dqkv, *att, *scratch;                  /* attention */
    float *logits, *losses;                             /* [N, V] */
    int32_t *ids, *targets;
    float *wte, *dwte;                                  /* [V, C] */
    float *param, *grad, *m, *v;                        /* n_params */
    uint16_t *half;
    double *dsum;
    uint16_t *x16, *w16, *dw16, *logits16, *qkv16, *out16; /* the 16-bit cases */
    float *lse;
    void *ws16;
    size_t n_params;
} kbufs;

static kbufs K;

static void k_layernorm_fwd(void *a) {
    (void)a;
    OK(ds_cuda_layernorm_forward(g_ctx, K.y, K.mean, K.rstd, K.x, K.w, K.b, K.N, C, 1e-5f));
}
static void k_layernorm_bwd(void *a) {
    (void)a;
    OK(ds_cuda_layernorm_backward(g_ctx, K.dx, 1, K.dw, K.db, K.y, K.x, K.w, K.mean, K.rstd, K.N,
                                  C));
}
static void k_matmul_dbias(void *a) {
    (void)a;
    OK(ds_cuda_matmul_backward(g_ctx, NULL, 1, NULL, K.db, K.y, NULL, NULL, K.N, C, C));
}
static void k_gelu_fwd(void *a) {
    (void)a;
    OK(ds_cuda_gelu_forward(g_ctx, K.dh, K.h, (size_t)K.N * 4 * C));
}
static void k_gelu_bwd(void *a) {
    (void)a;
    OK(ds_cuda_gelu_backward(g_ctx, K.dh, 1, K.h, K.h, (size_t)K.N * 4 * C));
}
static void k_residual(void *a) {
    (void)a;
    OK(ds_cuda_add_forward(g_ctx, K.y, K.x, K.dx, (size_t)K.N * C));
}
static void k_attention_fwd(void *a) {
    (void)a;
    OK(ds_cuda_attention_forward(g_ctx, K.y, K.att, K.qkv, K.B, K.T, C, NH));
}
static void k_attention_bwd(void *a) {
    (void)a;
    OK(ds_cuda_attention_backward(g_ctx, K.dqkv, 1, K.scratch, K.y, K.qkv, K.att, K.B, K.T, C, NH));
}
static void k_ce_fused(void *a) {
    (void)a;
    OK(ds_cuda_crossentropy_forward_backward(g_ctx, K.losses, K.logits, K.logits, K.targets,
                                             1.0f / K.N, K.N, V, NULL));
}
/* the head with 16-bit input and logits, V columns (a = &V) */
static void k_head16_fwd(void *a) {
    int v = *(const int *)a;
    OK(ds_cuda_matmul16_forward(g_ctx, DS_HALF_BF16, K.logits16, K.x16, DS_MM16_IN | DS_MM16_OUT,
                                K.w16, NULL, K.N, C, v, K.ws16));
}
static void k_head16_bwd(void *a) {
    int v = *(const int *)a;
    OK(ds_cuda_matmul16_backward(g_ctx, DS_HALF_BF16, K.dx, 1, K.dw16, NULL, K.logits16, K.x16,
                                 DS_MM16_IN | DS_MM16_OUT, K.w16, K.N, C, v, K.ws16));
}
static void k_ce16(void *a) {
    (void)a;
    OK(ds_cuda_crossentropy16(g_ctx, DS_HALF_BF16, K.losses, K.logits16, K.logits16, K.targets,
                              1.0f / K.N, K.N, V));
}
/* the flash kernels' argument: the attention dropout p (NULL: none) under one key */
static const ds_rng_key FLASH_KEY = {1234, 1, 2, 0, 0};
static float flash_p(const void *a) { return a ? *(const float *)a : 0.0f; }
static void k_flash_fwd(void *a) {
    OK(ds_cuda_flash_attention_forward(g_ctx, K.y, K.lse, K.qkv, K.B, K.T, C, NH, flash_p(a),
                                       FLASH_KEY));
}
static void k_flash_bwd(void *a) {
    OK(ds_cuda_flash_attention_backward(g_ctx, K.dqkv, 1, K.scratch, K.x, K.qkv, K.y, K.lse, K.B,
                                        K.T, C, NH, flash_p(a), FLASH_KEY));
}
static void k_flash16_fwd(void *a) {
    OK(ds_cuda_flash_attention16_forward(g_ctx, DS_HALF_BF16, K.out16, K.lse, K.qkv16, K.B, K.T,
                                         C, NH, flash_p(a), FLASH_KEY, 1, 1));
}
static void k_flash16_bwd(void *a) {
    OK(ds_cuda_flash_attention16_backward(g_ctx, DS_HALF_BF16, K.dqkv, 1, K.scratch, K.x, K.qkv16,
                                          K.out16, K.lse, K.B, K.T, C, NH, flash_p(a), FLASH_KEY, 1,
                                          1, 0));
}
static void k_embed_fwd(void *a) {
    (void)a;
    OK(ds_cuda_embedding_forward(g_ctx, K.y, K.ids, K.wte, K.N, C));
}
static void k_embed_bwd(void *a) {
    (void)a;
    OK(ds_cuda_embedding_backward(g_ctx, K.dwte, K.y, K.ids, K.N, C));
}
static void k_dropout(void *a) {
    (void)a;
    ds_rng_key key = {1234, 1, 2, 3, 0};
    OK(ds_cuda_dropout_forward(g_ctx, K.y, K.x, (size_t)K.N * C, 0.1f, key));
}
static void k_adamw(void *a) {
    (void)a;
    OK(ds_cuda_adamw_update(g_ctx, K.param, K.grad, K.m, K.v, K.n_params, 6e-4f, 0.9f, 0.95f,
                            1e-8f, 0.1f, 1));
}
static void k_sumsq(void *a) {
    (void)a;
    OK(ds_cuda_sumsq(g_ctx, K.grad, K.n_params, K.dsum));
}
static void k_to_bf16(void *a) {
    (void)a;
    OK(ds_cuda_f32_to_bf16(g_ctx, K.half, K.param, K.n_params));
}

typedef struct kernel_case {
    const char *name;
    bench_fn fn;
    double bytes;      /* the traffic GB/s is figured from; 0: none clear */
    const void *arg;   /* fn's argument */
    double flop;       /* a GEMM's FLOPs, for TFLOP/s; 0: not a GEMM */
} kernel_case;

static void bench_kernels(int B, int T) {
    int N = B * T;
    K.B = B, K.T = T, K.N = N;
    size_t NC = (size_t)N * C;
    K.x = drand(NC, 1), K.y = drand(NC, 1), K.dx = drand(NC, 1);
    K.w = drand(C, 1), K.b = drand(C, 1), K.dw = drand(C, 1), K.db = drand(C, 1);
    K.mean = drand(N, 1), K.rstd = drand(N, 1);
    K.h = drand(4 * NC, 1), K.dh = drand(4 * NC, 1);
    K.qkv = drand(3 * NC, 1), K.dqkv = drand(3 * NC, 1);
    size_t natt = (size_t)B * NH * T * T;
    K.att = drand(natt, 1), K.scratch = dalloc(natt * sizeof(float));
    K.logits = drand((size_t)N * V, 4), K.losses = dalloc((size_t)N * sizeof(float));
    K.wte = drand((size_t)V * C, 1), K.dwte = drand((size_t)V * C, 1);
    int32_t *ids = malloc((size_t)N * sizeof *ids);
    if (!ids) exit(1);
    uint32_t s = 7;
    for (int n = 0; n < N; n++) {
        s = s * 1664525u + 1013904223u;
        ids[n] = (int32_t)((s >> 8) % V);
    }
    K.ids = dalloc((size_t)N * 4), K.targets = dalloc((size_t)N * 4);
    OK(ds_cuda_to_device(g_ctx, K.ids, ids, (size_t)N * 4));
    OK(ds_cuda_to_device(g_ctx, K.targets, ids, (size_t)N * 4));
    free(ids);
    K.n_params = 124439808;
    K.param = drand(K.n_params, 1), K.grad = drand(K.n_params, 1);
    K.m = drand(K.n_params, 0.01f), K.v = dalloc(K.n_params * 4);
    OK(ds_cuda_memset0(g_ctx, K.v, K.n_params * 4));
    K.half = dalloc(K.n_params * 2), K.dsum = dalloc(sizeof(double));
    /* 16-bit cases: contents do not matter to the time but must be finite (zeros are) */
    enum { VP = 50304 };
    K.x16 = dalloc(NC * 2), K.w16 = dalloc((size_t)VP * C * 2), K.dw16 = dalloc((size_t)VP * C * 2);
    K.logits16 = dalloc((size_t)N * VP * 2), K.qkv16 = dalloc(3 * NC * 2), K.out16 = dalloc(NC * 2);
    K.lse = dalloc((size_t)B * NH * T * 4);
    OK(ds_cuda_memset0(g_ctx, K.x16, NC * 2));
    OK(ds_cuda_memset0(g_ctx, K.w16, (size_t)VP * C * 2));
    OK(ds_cuda_memset0(g_ctx, K.logits16, (size_t)N * VP * 2));
    OK(ds_cuda_memset0(g_ctx, K.qkv16, 3 * NC * 2));
    size_t ws16 = ds_matmul16_workspace(DS_GEMM16_HALF, 1, (size_t)N, C, V, DS_MM16_IN | DS_MM16_OUT);
    K.ws16 = dalloc(ws16 ? ws16 : 256);
    static const int v_odd = V, v_pad = VP;
    static const float attn_pdrop = 0.1f; /* GPT-2's */
    double head_flop = 2.0 * N * C * (double)V;
    double P = (double)K.n_params;
    const kernel_case cases[] = {
        {"layernorm_fwd", k_layernorm_fwd, 8.0 * NC, NULL, 0},
        {"layernorm_bwd", k_layernorm_bwd, 4 * 3.0 * NC + 4.0 * NC, NULL, 0},
        {"matmul_dbias", k_matmul_dbias, 4.0 * NC, NULL, 0},
        {"gelu_fwd", k_gelu_fwd, 2 * 4 * 4.0 * NC, NULL, 0},
        {"gelu_bwd", k_gelu_bwd, 3 * 4 * 4.0 * NC, NULL, 0},
        {"residual_add", k_residual, 3 * 4.0 * NC, NULL, 0},
        {"attention_fwd", k_attention_fwd, 0, NULL, 0},
        {"attention_bwd", k_attention_bwd, 0, NULL, 0},
        {"crossentropy_fused", k_ce_fused, 2 * 4.0 * N * (double)V, NULL, 0},
        {"crossentropy16_bf16", k_ce16, 2 * 2.0 * N * (double)V, NULL, 0},
        {"head16_fwd_V50257", k_head16_fwd, 0, &v_odd, head_flop},
        {"head16_fwd_V50304", k_head16_fwd, 0, &v_pad, head_flop * VP / V},
        {"head16_bwd_V50257", k_head16_bwd, 0, &v_odd, 2 * head_flop},
        {"head16_bwd_V50304", k_head16_bwd, 0, &v_pad, 2 * head_flop * VP / V},
        {"flash_fwd_f32", k_flash_fwd, 0, NULL, 0},
        {"flash_bwd_f32", k_flash_bwd, 0, NULL, 0},
        {"flash_fwd_bf16", k_flash16_fwd, 0, NULL, 0},
        {"flash_bwd_bf16", k_flash16_bwd, 0, NULL, 0},
        {"flash_fwd_bf16_drop", k_flash16_fwd, 0, &attn_pdrop, 0},
        {"flash_bwd_bf16_drop", k_flash16_bwd, 0, &attn_pdrop, 0},
        {"embedding_fwd", k_embed_fwd, 8.0 * NC, NULL, 0},
        {"embedding_bwd", k_embed_bwd, 0, NULL, 0},
        {"dropout_fwd", k_dropout, 8.0 * NC, NULL, 0},
        {"adamw_124M", k_adamw, 4 * 7.0 * P, NULL, 0},
        {"sumsq_124M", k_sumsq, 4.0 * P, NULL, 0},
        {"f32_to_bf16_124M", k_to_bf16, 6.0 * P, NULL, 0},
    };
    printf("\nds_cuda kernels (B=%d T=%d, gpt2-124M widths), %d calls per timing\n", B, T, g_reps);
    printf("%-20s %10s %10s\n", "kernel", "ms/call", "GB/s");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double ms = time_ms(cases[i].fn, (void *)cases[i].arg);
        double gbs = cases[i].bytes > 0 ? cases[i].bytes / (ms * 1e-3) / 1e9 : 0.0;
        double tfs = cases[i].flop > 0 ? cases[i].flop / (ms * 1e-3) / 1e12 : 0.0;
        printf("%-20s %10.4f %10.1f", cases[i].name, ms, gbs);
        if (tfs > 0) printf(" %8.1f TFLOP/s", tfs);
        printf("\n{\"bench\":\"cuda_kernel\",\"model\":\"gpt2-124M\",\"kernel\":\"%s\",\"B\":%d,"
               "\"T\":%d,\"ms\":%.5f,\"gb_per_s\":%.1f,\"tflop_per_s\":%.1f}\n",
               cases[i].name, B, T, ms, gbs, tfs);
    }
}

int main(int argc, char **argv) {
    int B = 8, T = 1024;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--B")) B = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--T")) T = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--reps")) g_reps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) only = argv[++i];
        else {
            fprintf(stderr, "usage: bench_gpu [--B N] [--T N] [--reps N] [--only gemm|kernels]\n");
            return 2;
        }
    }
    if (B < 1 || T < 1 || g_reps < 1) {
        fprintf(stderr, "bench_gpu: --B, --T and --reps must be positive\n");
        return 2;
    }
    char why[512];
    g_ctx = ds_cuda_ctx_create(0, why, sizeof why);
    if (!g_ctx) {
        fprintf(stderr, "bench_gpu: %s\n", why);
        return 2;
    }
    ds_gpu dev;
    if (ds_gpu_info(0, &dev, why, sizeof why) == 0)
        printf("device: %s (sm_%d%d, %d SMs, %.0f GiB)\n", dev.name, dev.cc_major, dev.cc_minor,
               dev.multiprocessors, dev.total_mem / 1073741824.0);
    if (!only || !strcmp(only, "gemm")) bench_gemms(B * T);
    if (!only || !strcmp(only, "kernels")) bench_kernels(B, T);
    ds_cuda_ctx_free(g_ctx);
    return 0;
}
