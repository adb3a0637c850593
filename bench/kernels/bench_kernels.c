/* bench_kernels: what the CPU kernels cost on a GPT's shapes.
 *   1. OpenBLAS sgemm GFLOP/s on every GEMM shape of a training step (forward, dinp,
 *      dweight), and the whole step's GEMM work at that speed: the machine's ceiling.
 *   2. The time of each non-GEMM kernel, per call and per step (attention: the reference
 *      pair beside the fused pair the engine runs, and both with GPT-2's attention
 *      dropout 0.1; only the fused one without dropout counts per step).
 *   3. A whole training step (forward, backward, grad clip, AdamW) made of the kernels
 *      alone, as llm.c's loop would run it (gpt_step.c): tokens/s, GFLOP/s counted as
 *      6*params*tokens + attention (12*L*C*T per token), and its ratio to (1).
 *   4. With (1): the fp32 multiply-add peak of the threads (fma_peak.c), the bound above
 *      sgemm, and how long the step's GEMMs would take at it.
 * Prints a table, then one JSON object per line per measured configuration.
 * Usage: bench_kernels [--model gpt2|small|all] [--only gemm|kernels|step] [--threads N]
 *                      [--reps N] [--B N] [--T N] */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fma_peak.h"
#include "gpt_step.h"
#include "kernels.h"

void openblas_set_num_threads(int num_threads);

typedef struct gpt_shape {
    const char *name;
    int V, L, NH, C;
} gpt_shape;

static const gpt_shape MODELS[] = {
    {"gpt2-124M", 50257, 12, 12, 768},
    {"small", 257, 4, 4, 256},
};

static int g_reps = 5;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *falloc(size_t n) {
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "bench_kernels: out of memory (%zu floats)\n", n);
        exit(1);
    }
    return p;
}

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    uint32_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = scale * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

/* best and median seconds of g_reps runs (after one warm-up) */
typedef struct timing {
    double best, median;
} timing;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TIME_IT(result, stmt)                                            \
    do {                                                                 \
        double ts_[64];                                                  \
        int n_ = g_reps < 64 ? g_reps : 64;                              \
        stmt;                                                            \
        for (int r_ = 0; r_ < n_; r_++) {                                \
            double t0_ = now_s();                                        \
            stmt;                                                        \
            ts_[r_] = now_s() - t0_;                                     \
        }                                                                \
        qsort(ts_, n_, sizeof(double), cmp_double);                      \
        (result).best = ts_[0];                                          \
        (result).median = ts_[n_ / 2];                                   \
    } while (0)

/* ---- 1. GEMM shapes ----------------------------------------------------------------- */
typedef struct linear {
    const char *name;
    int C, OC, per_step; /* per_step: how many such layers in one step */
    int bias;
} linear;

static int model_linears(const gpt_shape *m, linear out[5]) {
    int C = m->C, L = m->L;
    out[0] = (linear){"qkv", C, 3 * C, L, 1};
    out[1] = (linear){"attn_proj", C, C, L, 1};
    out[2] = (linear){"fc", C, 4 * C, L, 1};
    out[3] = (linear){"fc_proj", 4 * C, C, L, 1};
    out[4] = (linear){"lm_head", C, m->V, 1, 0};
    return 5;
}

typedef struct gemm_total {
    double flops, seconds; /* one step's GEMM work at sgemm speed */
    double ds_seconds;     /* the same through ds_matmul_* */
} gemm_total;

/* One GEMM of a step: pass 0 forward, 1 dinp, 2 dweight of a linear layer. */
static void run_gemm(const linear *l, int p, int N, int native, float *inp, float *w, float *out,
                     float *dinp, float *dw) {
    int C = l->C, OC = l->OC;
    if (native && p == 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, 1.0f,
                    out, OC);
    else if (native && p == 1)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, out, OC, w, C,
                    1.0f, dinp, C);
    else if (native)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, out, OC, inp, C,
                    1.0f, dw, C);
    else if (p == 0)
        ds_matmul_forward(out, inp, w, NULL, N, C, OC);
    else if (p == 1)
        ds_matmul_backward(dinp, 1, NULL, NULL, out, inp, w, N, C, OC);
    else
        ds_matmul_backward(NULL, 1, dw, NULL, out, inp, w, N, C, OC);
}

/* Every GEMM shape through ds_matmul_* (the kernels' path: single-threaded OpenBLAS calls
 * split over the OpenMP threads), first once untimed, then timed, then OpenBLAS with its
 * own threads (the reference). Without the untimed pass the first shapes timed (qkv) ran
 * at half speed for the first few dozen calls from the OpenMP threads. The kernels' path
 * runs before the reference: OpenBLAS's threads keep spinning for a while after a
 * threaded call, and would slow whatever runs next on the same cores. */
static gemm_total bench_gemms(const gpt_shape *m, int N, int threads, fma_peak peak) {
    linear lin[5];
    int nl = model_linears(m, lin);
    gemm_total tot = {0, 0, 0};
    timing t[5][3][2];
    for (int pass = 0; pass < 3; pass++) { /* 0: ds_matmul untimed, 1: timed, 2: native */
        int native = pass == 2;
        if (native) openblas_set_num_threads(threads);
        for (int i = 0; i < nl; i++) {
            size_t C = lin[i].C, OC = lin[i].OC;
            float *inp = frand(N * C, 1), *w = frand(OC * C, 0.1f), *out = frand(N * OC, 1);
            float *dinp = frand(N * C, 1), *dw = frand(OC * C, 1);
            for (int p = 0; p < 3; p++) {
                if (pass == 0) run_gemm(&lin[i], p, N, 0, inp, w, out, dinp, dw);
                else TIME_IT(t[i][p][native], run_gemm(&lin[i], p, N, native, inp, w, out, dinp, dw));
            }
            free(inp), free(w), free(out), free(dinp), free(dw);
        }
    }
    ds_kernels_set_threads(threads); /* back to single-threaded OpenBLAS */
    struct timespec settle = {0, 300000000}; /* let OpenBLAS's threads go to sleep */
    nanosleep(&settle, NULL);
    printf("\n%s: sgemm on the model's GEMM shapes (N=%d tokens, %d threads)\n", m->name, N,
           threads);
    printf("%-10s %-8s %6s %6s %6s %10s %10s %12s\n", "layer", "pass", "M", "N", "K", "ms",
           "GFLOP/s", "ds GFLOP/s");
    const char *pass[3] = {"forward", "dinp", "dweight"};
    for (int i = 0; i < nl; i++)
        for (int p = 0; p < 3; p++) {
            int C = lin[i].C, OC = lin[i].OC;
            int M = p == 2 ? OC : N, NN = p == 0 ? OC : C, K = p == 0 ? C : p == 1 ? OC : N;
            timing tn = t[i][p][1], td = t[i][p][0];
            double flops = 2.0 * M * NN * K;
            tot.flops += flops * lin[i].per_step;
            tot.seconds += tn.best * lin[i].per_step;
            tot.ds_seconds += td.best * lin[i].per_step;
            printf("%-10s %-8s %6d %6d %6d %10.3f %10.1f %12.1f\n", lin[i].name, pass[p], M, NN,
                   K, tn.best * 1e3, flops / tn.best * 1e-9, flops / td.best * 1e-9);
            printf("{\"bench\":\"sgemm\",\"model\":\"%s\",\"layer\":\"%s\",\"pass\":\"%s\","
                   "\"M\":%d,\"N\":%d,\"K\":%d,\"threads\":%d,\"ms_best\":%.4f,"
                   "\"ms_median\":%.4f,\"gflop_per_s\":%.2f,\"ds_matmul_ms_best\":%.4f,"
                   "\"ds_matmul_gflop_per_s\":%.2f}\n",
                   m->name, lin[i].name, pass[p], M, NN, K, threads, tn.best * 1e3,
                   tn.median * 1e3, flops / tn.best * 1e-9, td.best * 1e3,
                   flops / td.best * 1e-9);
        }
    printf("%s: one step's GEMMs: %.1f GFLOP in %.1f ms at sgemm speed = %.1f GFLOP/s "
           "(ds_matmul: %.1f ms, %.1f GFLOP/s)\n",
           m->name, tot.flops * 1e-9, tot.seconds * 1e3, tot.flops / tot.seconds * 1e-9,
           tot.ds_seconds * 1e3, tot.flops / tot.ds_seconds * 1e-9);
    double peak_ms = tot.flops / (peak.gflops * 1e9) * 1e3;
    printf("%s: the same GEMMs at the fp32 FMA peak (%s, %.1f GFLOP/s): %.1f ms; sgemm runs "
           "at %.0f%% of the peak\n",
           m->name, peak.isa, peak.gflops, peak_ms,
           100.0 * tot.flops / tot.seconds * 1e-9 / peak.gflops);
    printf("{\"bench\":\"sgemm_step\",\"model\":\"%s\",\"tokens\":%d,\"threads\":%d,"
           "\"blas_core\":\"%s\",\"gemm_gflop\":%.3f,\"gemm_ms\":%.3f,\"gflop_per_s\":%.2f,"
           "\"ds_matmul_ms\":%.3f,\"ds_matmul_gflop_per_s\":%.2f,\"fma_isa\":\"%s\","
           "\"fma_peak_gflop_per_s\":%.2f,\"gemm_ms_at_fma_peak\":%.3f}\n",
           m->name, N, threads, ds_blas_describe().core, tot.flops * 1e-9, tot.seconds * 1e3,
           tot.flops / tot.seconds * 1e-9, tot.ds_seconds * 1e3,
           tot.flops / tot.ds_seconds * 1e-9, peak.isa, peak.gflops, peak_ms);
    return tot;
}

/* ---- 2. non-GEMM kernels ------------------------------------------------------------ */
static void report_kernel(const char *model, const char *kernel, timing t, int per_step,
                          int threads, double *step_total) {
    *step_total += t.best * per_step;
    printf("%-22s %10.3f %10.3f %8d %10.2f\n", kernel, t.best * 1e3, t.median * 1e3, per_step,
           t.best * per_step * 1e3);
    printf("{\"bench\":\"kernel\",\"model\":\"%s\",\"kernel\":\"%s\",\"threads\":%d,"
           "\"ms_best\":%.4f,\"ms_median\":%.4f,\"calls_per_step\":%d,\"ms_per_step\":%.4f}\n",
           model, kernel, threads, t.best * 1e3, t.median * 1e3, per_step,
           t.best * per_step * 1e3);
}

static size_t model_params(const gpt_shape *m, int T) {
    size_t C = m->C;
    return (size_t)m->V * C + (size_t)T * C +
           (size_t)m->L * (12 * C * C + 13 * C) + 2 * C;
}

static void bench_non_gemm(const gpt_shape *m, int B, int T, int threads) {
    int C = m->C, NH = m->NH, V = m->V, L = m->L, N = B * T;
    size_t NC = (size_t)N * C, P = model_params(m, T);
    double step = 0;
    timing t;
    printf("\n%s: non-GEMM kernels (B=%d T=%d, %d threads)\n", m->name, B, T, threads);
    printf("%-22s %10s %10s %8s %10s\n", "kernel", "best ms", "median ms", "x/step", "ms/step");
    float *a = frand(4 * NC, 1), *b = frand(4 * NC, 1), *o = frand(4 * NC, 1);
    float *w = frand(4 * C, 1), *mean = falloc(N), *rstd = falloc(N);
    TIME_IT(t, ds_layernorm_forward(o, mean, rstd, a, w, w + C, N, C, 1e-5f));
    report_kernel(m->name, "layernorm_forward", t, 2 * L + 1, threads, &step);
    TIME_IT(t, ds_layernorm_backward(o, 1, w + 2 * C, w + 3 * C, b, a, w, mean, rstd, N, C));
    report_kernel(m->name, "layernorm_backward", t, 2 * L + 1, threads, &step);
    TIME_IT(t, ds_gelu_forward(o, a, 4 * NC));
    report_kernel(m->name, "gelu_forward", t, L, threads, &step);
    TIME_IT(t, ds_gelu_backward(o, 1, a, b, 4 * NC));
    report_kernel(m->name, "gelu_backward", t, L, threads, &step);
    TIME_IT(t, ds_add_forward(o, a, b, NC));
    report_kernel(m->name, "residual_add", t, 2 * L, threads, &step);
    TIME_IT(t, ds_accumulate(o, a, NC));
    report_kernel(m->name, "accumulate", t, 2 * L, threads, &step);
    {
        float *qkv = frand(3 * NC, 1), *att = falloc((size_t)B * NH * T * T);
        float *scratch = falloc((size_t)B * NH * T * T), *dqkv = frand(3 * NC, 1);
        float *lse = falloc((size_t)B * NH * T);
        double reference = 0; /* the engine runs the fused pair (with dropout too) */
        TIME_IT(t, ds_attention_forward(o, att, qkv, B, T, C, NH));
        report_kernel(m->name, "attention_forward", t, L, threads, &reference);
        TIME_IT(t, ds_attention_backward(dqkv, 1, scratch, b, qkv, att, B, T, C, NH));
        report_kernel(m->name, "attention_backward", t, L, threads, &reference);
        ds_rng_key none = {0};
        TIME_IT(t, ds_attention_forward_fused(o, lse, qkv, B, T, C, NH, 0.0f, none));
        report_kernel(m->name, "attention_fwd_fused", t, L, threads, &step);
        TIME_IT(t, ds_attention_backward_fused(dqkv, 1, b, qkv, lse, B, T, C, NH, 0.0f, none));
        report_kernel(m->name, "attention_bwd_fused", t, L, threads, &step);
        /* GPT-2's attention dropout 0.1: the reference pair (what the engine ran with it
         * before) beside the fused pair; neither counts in the step (GPT's dropout is 0) */
        ds_rng_key key = {1234, 1, 2, 0, 0};
        TIME_IT(t, ds_attention_forward_dropout(o, att, qkv, B, T, C, NH, 0.1f, key));
        report_kernel(m->name, "attention_fwd_drop", t, L, threads, &reference);
        TIME_IT(t, ds_attention_backward_dropout(dqkv, 1, scratch, b, qkv, att, B, T, C, NH, 0.1f,
                                                 key));
        report_kernel(m->name, "attention_bwd_drop", t, L, threads, &reference);
        TIME_IT(t, ds_attention_forward_fused(o, lse, qkv, B, T, C, NH, 0.1f, key));
        report_kernel(m->name, "attn_fwd_fused_drop", t, L, threads, &reference);
        TIME_IT(t, ds_attention_backward_fused(dqkv, 1, b, qkv, lse, B, T, C, NH, 0.1f, key));
        report_kernel(m->name, "attn_bwd_fused_drop", t, L, threads, &reference);
        free(qkv), free(att), free(scratch), free(dqkv), free(lse);
    }
    {
        float *bias_grad = falloc(4 * (size_t)C);
        float *dout = frand((size_t)N * 4 * C, 1);
        /* the bias part of matmul_backward, alone (dinp and dweight NULL) */
        TIME_IT(t, ds_matmul_backward(NULL, 1, NULL, bias_grad, dout, a, w, N, C, 4 * C));
        report_kernel(m->name, "bias_backward(4C)", t, L, threads, &step);
        free(bias_grad), free(dout);
    }
    {
        float *logits = frand((size_t)N * V, 8), *dlogits = frand((size_t)N * V, 1);
        float *losses = falloc(N);
        int32_t *tg = malloc(N * sizeof *tg), *ids = malloc(N * sizeof *ids);
        for (int i = 0; i < N; i++) tg[i] = ids[i] = (i * 7919) % V;
        TIME_IT(t, ds_crossentropy_forward(losses, logits, tg, N, V));
        report_kernel(m->name, "crossentropy_forward", t, 0, threads, &step);
        TIME_IT(t, ds_crossentropy_backward(dlogits, logits, tg, 1.0f / N, N, V));
        report_kernel(m->name, "crossentropy_backward", t, 0, threads, &step);
        TIME_IT(t, ds_crossentropy_forward_backward(losses, dlogits, logits, tg, 1.0f / N, N, V));
        report_kernel(m->name, "crossentropy_fwd_bwd", t, 0, threads, &step);
        /* in place, as a head's backward would use it (the timing does not depend on the
         * values, so the overwritten logits need no restoring between runs) */
        TIME_IT(t, ds_crossentropy_forward_backward(losses, logits, logits, tg, 1.0f / N, N, V));
        report_kernel(m->name, "crossentropy_fwd_bwd_inplace", t, 1, threads, &step);
        float *wte = frand((size_t)V * C, 1);
        TIME_IT(t, ds_embedding_forward(o, ids, wte, N, C));
        report_kernel(m->name, "embedding_forward", t, 2, threads, &step);
        TIME_IT(t, ds_embedding_backward(wte, b, ids, N, C));
        report_kernel(m->name, "embedding_backward", t, 2, threads, &step);
        free(logits), free(dlogits), free(losses), free(tg), free(ids), free(wte);
    }
    {
        float *p = frand(P, 1), *g = frand(P, 0.01f), *mm = frand(P, 0.01f), *vv = falloc(P);
        for (size_t i = 0; i < P; i++) vv[i] = 1e-4f;
        TIME_IT(t, ds_adamw_update(p, g, mm, vv, P, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 10));
        report_kernel(m->name, "adamw_update", t, 1, threads, &step);
        TIME_IT(t, ds_sumsq(g, P));
        report_kernel(m->name, "sumsq(grads)", t, 1, threads, &step);
        TIME_IT(t, memset(g, 0, P * sizeof(float)));
        report_kernel(m->name, "memset(grads)", t, 1, threads, &step);
        free(p), free(g), free(mm), free(vv);
    }
    printf("%s: non-GEMM kernels total per step: %.1f ms (%zu params)\n", m->name, step * 1e3, P);
    printf("{\"bench\":\"non_gemm_step\",\"model\":\"%s\",\"threads\":%d,\"params\":%zu,"
           "\"ms_per_step\":%.3f}\n", m->name, threads, P, step * 1e3);
    free(a), free(b), free(o), free(w), free(mean), free(rstd);
}

/* ---- 3. a whole step -------------------------------------------------------------- */
typedef struct step_result {
    size_t params;
    double best, median, parts[4], gflops, loss0, loss;
} step_result;

static int bench_step(const gpt_shape *m, int B, int T, step_result *res) {
    gpt_step_cfg cfg = {m->V, T, m->L, m->NH, m->C, B, T};
    gpt_step *g = gpt_step_new(cfg);
    if (!g) {
        fprintf(stderr, "bench_kernels: out of memory for the %s step\n", m->name);
        return -1;
    }
    int N = B * T;
    int32_t *ids = malloc(2 * N * sizeof *ids), *tg = ids + N;
    for (int i = 0; i < N; i++) ids[i] = (i * 7919) % m->V, tg[i] = (i * 104729 + 1) % m->V;
    double steps[64], parts[4];
    int n = g_reps < 64 ? g_reps : 64;
    memset(res, 0, sizeof *res);
    res->loss0 = res->loss = gpt_step_run(g, ids, tg, 1, NULL);
    for (int r = 0; r < n; r++) {
        double t0 = now_s();
        res->loss = gpt_step_run(g, ids, tg, r + 2, parts);
        steps[r] = now_s() - t0;
        for (int k = 0; k < 4; k++) res->parts[k] += parts[k] / n;
    }
    qsort(steps, n, sizeof(double), cmp_double);
    res->best = steps[0], res->median = steps[n / 2];
    res->params = gpt_step_params(g);
    double flops = 6.0 * res->params * N + 12.0 * m->L * m->C * T * (double)N;
    res->gflops = flops / res->best * 1e-9;
    free(ids);
    gpt_step_free(g);
    return 0;
}

/* gt.seconds is 0 when the GEMM section did not run: no ratio then */
static void print_step(const gpt_shape *m, int B, int T, int threads, const step_result *r,
                       gemm_total gt) {
    int N = B * T;
    double sgemm_gflops = gt.seconds > 0 ? gt.flops / gt.seconds * 1e-9 : 0;
    printf("\n%s: whole training step from the kernels (B=%d T=%d, %d threads, %zu params)\n",
           m->name, B, T, threads, r->params);
    printf("step best %.1f ms, median %.1f ms (mean: forward %.1f, backward %.1f, clip+AdamW "
           "%.1f, zero grads %.1f)\n", r->best * 1e3, r->median * 1e3, r->parts[0], r->parts[1],
           r->parts[2], r->parts[3]);
    printf("%.1f tokens/s, %.1f GFLOP/s", N / r->best, r->gflops);
    if (sgemm_gflops > 0)
        printf(" = %.0f%% of sgemm's %.1f GFLOP/s on the same shapes",
               100.0 * r->gflops / sgemm_gflops, sgemm_gflops);
    printf("; loss %.3f -> %.3f\n", r->loss0, r->loss);
    printf("{\"bench\":\"kernel_step\",\"model\":\"%s\",\"B\":%d,\"T\":%d,\"threads\":%d,"
           "\"params\":%zu,\"step_ms_best\":%.2f,\"step_ms_median\":%.2f,"
           "\"forward_ms\":%.2f,\"backward_ms\":%.2f,\"optimizer_ms\":%.2f,"
           "\"zero_grad_ms\":%.2f,\"tokens_per_s\":%.2f,\"gflop_per_s\":%.2f,"
           "\"sgemm_gflop_per_s\":%.2f,\"fraction_of_sgemm\":%.3f}\n",
           m->name, B, T, threads, r->params, r->best * 1e3, r->median * 1e3, r->parts[0],
           r->parts[1], r->parts[2], r->parts[3], N / r->best, r->gflops, sgemm_gflops,
           sgemm_gflops > 0 ? r->gflops / sgemm_gflops : 0.0);
}

int main(int argc, char **argv) {
    ds_cpu_env_prepare(argv, "bench_kernels"); /* OpenMP waits as under dsrun */
    const char *which = "all", *only = "all";
    int threads = 2, B = 4, T = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--B") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) T = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--model gpt2|small|all] [--only gemm|kernels|step] "
                            "[--threads N] [--reps N] [--B N] [--T N]\n", argv[0]);
            return 2;
        }
    }
    if (strcmp(only, "all") && strcmp(only, "gemm") && strcmp(only, "kernels") &&
        strcmp(only, "step")) {
        fprintf(stderr, "bench_kernels: --only takes gemm, kernels or step, not '%s'\n", only);
        return 2;
    }
    if (strcmp(which, "all") && strcmp(which, "gpt2") && strcmp(which, "gpt2-124M") &&
        strcmp(which, "small")) {
        fprintf(stderr, "bench_kernels: --model takes gpt2, small or all, not '%s'\n", which);
        return 2;
    }
    if (threads < 1 || g_reps < 1 || B < 1 || T < 1) {
        fprintf(stderr, "bench_kernels: --threads, --reps, --B and --T must be >= 1\n");
        return 2;
    }
    ds_kernels_set_threads(threads);
    ds_blas_info blas = ds_blas_describe();
    printf("OpenBLAS kernels: %s (%s)\n", blas.core, blas.why);
    int gemms = !strcmp(only, "all") || !strcmp(only, "gemm");
    fma_peak peak = {0.0, NULL};
    if (gemms) {
        peak = fma_peak_measure(threads);
        printf("fp32 FMA peak: %.1f GFLOP/s (%s, %d threads)\n", peak.gflops, peak.isa, threads);
        printf("{\"bench\":\"fma_peak\",\"isa\":\"%s\",\"threads\":%d,\"gflop_per_s\":%.2f}\n",
               peak.isa, threads, peak.gflops);
    }
    for (size_t i = 0; i < sizeof MODELS / sizeof MODELS[0]; i++) {
        const gpt_shape *m = &MODELS[i];
        int want = !strcmp(which, "all") || !strcmp(which, m->name) ||
                   (!strcmp(which, "gpt2") && i == 0);
        if (!want) continue;
        /* The GEMM section runs last: its OpenBLAS-threaded reference leaves OpenBLAS's
         * threads spinning for a while, which would slow what follows. */
        int all = !strcmp(only, "all"), step = all || !strcmp(only, "step");
        gemm_total gt = {0, 0, 0};
        step_result sr;
        if (all || !strcmp(only, "kernels")) bench_non_gemm(m, B, T, threads);
        if (step && bench_step(m, B, T, &sr) != 0) return 1;
        if (gemms) gt = bench_gemms(m, B * T, threads, peak);
        if (step) print_step(m, B, T, threads, &sr, gt);
    }
    return 0;
}
