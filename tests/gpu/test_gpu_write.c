/* The cuda table's backward entries that produce an input gradient, in both modes
 * (kernel_table.h's acc): writing (acc = 0) over a buffer of NaNs against accumulating
 * (acc = 1) into zeros, on the device. The elementwise, LayerNorm, dropout and attention
 * kernels store `v` or `old + v` from the same v: bit for bit but the sign of a zero.
 * The GEMMs (cuBLAS sgemm, cuBLASLt) run with beta 0 or 1, which may pick another
 * kernel: within the table test's GEMM tolerance of the CPU's written gradient, and not
 * a NaN read from the buffer. matmul16 over more than DS_MATMUL16_COLS outputs: the
 * first chunk writes, the next add. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "kernel_table.h"

static gh G;
static const ds_kernel_table *CPU = &ds_cpu_kernels, *DEV;

static float *rnd(size_t n, float lo, float hi) { return gh_randf(&G, n, lo, hi); }
static void *up(const void *h, size_t bytes) { return gh_dev_up(&G, h, bytes); }
static void dfree(void *d, size_t bytes) { gh_dev_free(&G, d, bytes); }

/* n floats on the device: zeros (acc = 1's start) or NaNs (acc = 0's) */
static void *start(size_t n, int acc) {
    float *h = gh_alloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = acc ? 0.0f : NAN;
    void *d = up(h, n * 4);
    free(h);
    return d;
}

/* The entry run both ways through run(dst, acc); the written result against the
 * accumulated one: bit for bit but zero signs (exact), else both within the GEMM
 * tolerance (atol + 1e-4|x|) of want, the CPU's written gradient. */
typedef void (*run_fn)(void *dst, int acc);
static void modes(const char *what, size_t n, run_fn run, int exact, const float *want,
                  float atol) {
    void *A = start(n, 1), *W = start(n, 0);
    run(A, 1);
    run(W, 0);
    float *a = gh_alloc(n * 4), *w = gh_alloc(n * 4);
    gh_dev_down(&G, a, A, n * 4);
    gh_dev_down(&G, w, W, n * 4);
    char line[200];
    if (exact) {
        size_t bad = 0, signs = 0;
        for (size_t i = 0; i < n; i++) {
            if (!memcmp(&a[i], &w[i], 4)) continue;
            if (a[i] == 0.0f && w[i] == 0.0f)
                signs++;
            else
                bad++;
        }
        snprintf(line, sizeof line,
                 "%s: written = accumulated into zeros (%zu differ, %zu in a "
                 "zero's sign only)",
                 what, bad, signs);
        gh_expect(&G, line, bad == 0);
    } else {
        snprintf(line, sizeof line, "%s written", what);
        gh_close(&G, line, w, want, n, atol, 1e-4f);
        snprintf(line, sizeof line, "%s accumulated into zeros", what);
        gh_close(&G, line, a, want, n, atol, 1e-4f);
    }
    free(a), free(w);
    dfree(A, n * 4), dfree(W, n * 4);
}

/* ---- the inputs each entry reads (device pointers), set before its modes() --------- */
static int N, C, OC, B, T, NH;
static size_t n;
static ds_half H;
static float P;
static ds_rng_key KEY = {.seed = 5, .step = 2, .layer = 7, .micro = 1, .offset = 3};
static void *X, *Wt, *DY, *DW, *DB, *MEAN, *RSTD, *ATT, *SCR, *QKV, *OUT, *LSE, *WS;
static int IO16;

static void run_matmul(void *d, int acc) {
    DEV->matmul_backward(d, acc, DW, DB, DY, X, Wt, N, C, OC);
}
static void run_matmul16(void *d, int acc) {
    DEV->matmul16_backward(H, d, acc, DW, DB, DY, X, IO16, Wt, N, C, OC, WS);
}
static void run_gelu(void *d, int acc) { DEV->gelu_backward(d, acc, X, DY, n); }
static void run_gelu16(void *d, int acc) { DEV->gelu16_backward(H, d, acc, X, DY, n, 0); }
static void run_layernorm(void *d, int acc) {
    DEV->layernorm_backward(d, acc, DW, DB, DY, X, Wt, MEAN, RSTD, N, C);
}
static void run_layernorm16(void *d, int acc) {
    DEV->layernorm16_backward(H, d, acc, DW, DB, DY, X, Wt, MEAN, RSTD, N, C, WS);
}
static void run_dropout(void *d, int acc) { DEV->dropout_backward(d, acc, DY, n, P, KEY); }
static void run_attention(void *d, int acc) {
    if (P > 0)
        DEV->attention_backward_dropout(d, acc, SCR, DY, QKV, ATT, B, T, C, NH, P, KEY);
    else
        DEV->attention_backward(d, acc, SCR, DY, QKV, ATT, B, T, C, NH);
}
static void run_fused(void *d, int acc) {
    DEV->attention_backward_fused(d, acc, SCR, DY, QKV, OUT, LSE, B, T, C, NH, P, KEY);
}
static void run_fused16(void *d, int acc) {
    DEV->attention16_backward_fused(H, d, acc, SCR, DY, QKV, OUT, LSE, B, T, C, NH, P, KEY, 1, 1, 0,
                                    NULL);
}

static void test_matmul(int n_, int c_, int oc_) {
    N = n_, C = c_, OC = oc_;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *dy = rnd(ny, -1, 1), *want = gh_alloc(nx * 4);
    X = up(x, nx * 4), Wt = up(w, nw * 4), DY = up(dy, ny * 4), DW = NULL, DB = NULL;
    CPU->matmul_backward(want, 0, NULL, NULL, dy, x, w, N, C, OC);
    modes("matmul_backward dinp", nx, run_matmul, 0, want, 2e-4f);
    free(x), free(w), free(dy), free(want);
    dfree(X, nx * 4), dfree(Wt, nw * 4), dfree(DY, ny * 4);
}

static void test_matmul16(ds_half h, int n_, int c_, int oc_, int io16) {
    N = n_, C = c_, OC = oc_, H = h, IO16 = io16;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *dy = rnd(ny, -1, 1), *want = gh_alloc(nx * 4);
    uint16_t *x16 = gh_alloc(nx * 2), *w16 = gh_alloc(nw * 2), *dy16 = gh_alloc(ny * 2);
    ds_half_from_f32(h, x16, x, nx), ds_half_from_f32(h, w16, w, nw),
        ds_half_from_f32(h, dy16, dy, ny);
    const void *xin = io16 & DS_MM16_IN ? (const void *)x16 : x;
    const void *dyin = io16 & DS_MM16_OUT ? (const void *)dy16 : dy;
    size_t cpu_ws = ds_matmul16_workspace(DS_GEMM16_F32, 1, nx / C, C, OC, io16);
    void *ws = gh_alloc(cpu_ws);
    CPU->matmul16_backward(h, want, 0, NULL, NULL, dyin, xin, io16, w16, N, C, OC, ws);
    free(ws);
    size_t xb = nx * (io16 & DS_MM16_IN ? 2 : 4), yb = ny * (io16 & DS_MM16_OUT ? 2 : 4);
    size_t wsb = ds_matmul16_workspace(DS_GEMM16_HALF, 1, nx / C, C, OC, io16);
    X = up(xin, xb), Wt = up(w16, nw * 2), DY = up(dyin, yb), DW = NULL, DB = NULL;
    WS = wsb ? gh_dev_zeros(&G, wsb) : NULL;
    char what[96];
    snprintf(what, sizeof what, "matmul16_backward %s dinp OC %d io16 %d",
             h == DS_HALF_BF16 ? "bf16" : "fp16", OC, io16);
    /* test_gpu_table's: dinp sums OC products, its absolute part grows past 768 */
    modes(what, nx, run_matmul16, 0, want, 2e-4f * (OC > 768 ? sqrtf(OC / 768.0f) : 1.0f));
    free(x), free(w), free(dy), free(want), free(x16), free(w16), free(dy16);
    dfree(X, xb), dfree(Wt, nw * 2), dfree(DY, yb);
    if (WS) dfree(WS, wsb);
}

static void test_elementwise(size_t n_) {
    n = n_;
    float *x = rnd(n, -4, 4), *dy = rnd(n, -1, 1);
    uint16_t *x16 = gh_alloc(n * 2);
    X = up(x, n * 4), DY = up(dy, n * 4);
    modes("gelu_backward", n, run_gelu, 1, NULL, 0);
    for (int h = DS_HALF_BF16; h <= DS_HALF_F16; h++) {
        H = (ds_half)h;
        ds_half_from_f32(H, x16, x, n);
        void *X16 = up(x16, n * 2);
        void *keep = X;
        X = X16;
        modes(h == DS_HALF_BF16 ? "gelu16_backward bf16" : "gelu16_backward fp16", n, run_gelu16, 1,
              NULL, 0);
        X = keep;
        dfree(X16, n * 2);
    }
    P = 0.2f;
    modes("dropout_backward p 0.2", n, run_dropout, 1, NULL, 0);
    P = 0.0f;
    modes("dropout_backward p 0", n, run_dropout, 1, NULL, 0);
    free(x), free(dy), free(x16);
    dfree(X, n * 4), dfree(DY, n * 4);
}

static void test_layernorm(int n_, int c_) {
    N = n_, C = c_;
    size_t nx = (size_t)N * C;
    float *x = rnd(nx, -2, 2), *dy = rnd(nx, -1, 1), *w = rnd(C, 0.5f, 1.5f), *b = rnd(C, -1, 1);
    float *y = gh_alloc(nx * 4), *mean = gh_alloc(N * 4), *rstd = gh_alloc(N * 4);
    CPU->layernorm_forward(y, mean, rstd, x, w, b, N, C, 1e-5f);
    X = up(x, nx * 4), DY = up(dy, nx * 4), Wt = up(w, C * 4), MEAN = up(mean, N * 4);
    RSTD = up(rstd, N * 4), DW = NULL, DB = NULL;
    modes("layernorm_backward dinp", nx, run_layernorm, 1, NULL, 0);
    dfree(Wt, C * 4);
    for (int h = DS_HALF_BF16; h <= DS_HALF_F16; h++) {
        H = (ds_half)h;
        uint16_t *w16 = gh_alloc(C * 2);
        ds_half_from_f32(H, w16, w, C);
        size_t wsb = ds_layernorm16_workspace(1, C);
        Wt = up(w16, C * 2), WS = gh_dev_zeros(&G, wsb);
        modes(h == DS_HALF_BF16 ? "layernorm16_backward bf16 dinp"
                                : "layernorm16_backward fp16 dinp",
              nx, run_layernorm16, 1, NULL, 0);
        free(w16);
        dfree(Wt, C * 2), dfree(WS, wsb);
    }
    free(x), free(dy), free(w), free(b), free(y), free(mean), free(rstd);
    dfree(X, nx * 4), dfree(DY, nx * 4), dfree(MEAN, N * 4), dfree(RSTD, N * 4);
}

static void test_attention(int b_, int t_, int c_, int nh_, float p) {
    B = b_, T = t_, C = c_, NH = nh_, P = p;
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = rnd(nq, -2, 2), *dy = rnd(ny, -1, 1), *y = gh_alloc(ny * 4),
          *att = gh_alloc(na * 4);
    if (p > 0)
        CPU->attention_forward_dropout(y, att, qkv, B, T, C, NH, p, KEY);
    else
        CPU->attention_forward(y, att, qkv, B, T, C, NH);
    QKV = up(qkv, nq * 4), DY = up(dy, ny * 4), ATT = up(att, na * 4),
    SCR = gh_dev_zeros(&G, na * 4);
    char what[96];
    snprintf(what, sizeof what, "attention_backward%s T %d", p > 0 ? "_dropout" : "", T);
    modes(what, nq, run_attention, 1, NULL, 0);
    free(qkv), free(dy), free(y), free(att);
    dfree(QKV, nq * 4), dfree(DY, ny * 4), dfree(ATT, na * 4), dfree(SCR, na * 4);
}

static void test_fused(int b_, int t_, int c_, int nh_, float p) {
    B = b_, T = t_, C = c_, NH = nh_, P = p;
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rnd(nq, -2, 2), *dy = rnd(ny, -1, 1);
    QKV = up(qkv, nq * 4), DY = up(dy, ny * 4), OUT = gh_dev_zeros(&G, ny * 4);
    LSE = gh_dev_zeros(&G, nl * 4), SCR = gh_dev_zeros(&G, nl * 4);
    DEV->attention_forward_fused(OUT, LSE, QKV, B, T, C, NH, P, KEY);
    char what[96];
    snprintf(what, sizeof what, "attention_backward_fused T %d hs %d p %g", T, C / NH, P);
    modes(what, nq, run_fused, 1, NULL, 0);
    dfree(QKV, nq * 4), dfree(OUT, ny * 4);
    H = DS_HALF_BF16;
    uint16_t *q16 = gh_alloc(nq * 2);
    ds_half_from_f32(H, q16, qkv, nq);
    QKV = up(q16, nq * 2), OUT = gh_dev_zeros(&G, ny * 2);
    DEV->attention16_forward_fused(H, OUT, LSE, QKV, B, T, C, NH, P, KEY, 1, 1, NULL);
    snprintf(what, sizeof what, "attention16_backward_fused bf16 T %d hs %d p %g", T, C / NH, P);
    modes(what, nq, run_fused16, 1, NULL, 0);
    free(qkv), free(dy), free(q16);
    dfree(QKV, nq * 2), dfree(OUT, ny * 2), dfree(DY, ny * 4), dfree(LSE, nl * 4);
    dfree(SCR, nl * 4);
}

int main(void) {
    gh_init_device(&G, "test_gpu_write");
    DEV = G.dev->k;
    test_matmul(64, 48, 40);
    test_matmul(1000, 768, 3072);
    test_matmul16(DS_HALF_BF16, 64, 48, 40, 0);
    test_matmul16(DS_HALF_BF16, 1000, 768, 3072, DS_MM16_IN | DS_MM16_OUT);
    /* GPT's head: 13 chunks, the first written, the rest added */
    test_matmul16(DS_HALF_BF16, 64, 768, 50257, DS_MM16_IN | DS_MM16_OUT);
    test_matmul16(DS_HALF_F16, 64, 64, 8200, 0);
    test_elementwise(5);
    test_elementwise(65536 * 256 + 17); /* past one grid-stride sweep */
    test_layernorm(1000, 768);
    test_layernorm(37, 50);
    test_attention(2, 64, 128, 4, 0.0f);
    test_attention(1, 300, 96, 2, 0.2f);
    test_fused(2, 64, 128, 4, 0.0f);
    test_fused(1, 300, 128, 2, 0.0f);
    test_fused(2, 67, 256, 2, 0.0f);
    test_fused(1, 300, 128, 2, 0.1f); /* attention dropout: the mask redrawn in each mode */
    return gh_finish(&G);
}
