/* Every entry of the cuda device's kernel table (kernel_table.h) against the same entry
 * of the CPU table, through the device (ds_device_open("cuda", 0): its allocator, its
 * copies, its compute stream). Tolerances per dtype:
 *   bit for bit  elementwise adds and scales, embeddings, dropout, conversions, 16-bit
 *                arithmetic (one formula, one rounding: kernel_math.h)
 *   fp32 sums    GEMMs 2e-4 + 1e-4|x|; attention, layernorm ~1e-5 + 1e-4|x| (fused
 *                attention: 2e-5 + 2e-4|x| in backward, lse 1e-5); sums into
 *                a double 1e-12 relative
 *   16-bit copy  one unit in the last place of the 16-bit type (the fp32 master it is
 *                rounded from may differ in its last bit)
 *   16-bit GEMMs (matmul16) the same operands rounded to 16 bits on both sides, so the
 *                fp32 sums' tolerance for fp32 results (dinp's absolute part times
 *                sqrt(OC / 768) past 768 outputs); 16-bit gradients that plus one
 *                unit in the 16-bit type's last place (the rounding of two sums that
 *                differ in their last bits); fp16 overflow to inf bit for bit
 *                16-bit activations (16-bit input, output, output gradient): the same,
 *                a 16-bit output within the GEMM tolerance plus one unit in the last place
 *   16-bit logits (crossentropy16) losses as fp32's; d(logits) one unit in the last place
 *   16-bit embeddings and LayerNorm (embedding16, posemb16, layernorm16) bit for bit
 *                but LayerNorm's sums (its fp32 tolerances; dweight, dbias as matmul16's)
 *   16-bit activations (gelu16, layernorm16's 16-bit output, attention16) the fp32
 *                entries' tolerances, plus one unit in the 16-bit type's last place
 *                for a 16-bit result */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static gh G;
static const ds_kernel_table *CPU = &ds_cpu_kernels, *DEV;

static float *rnd(size_t n, float lo, float hi) { return gh_randf(&G, n, lo, hi); }
static void *up(const void *h, size_t bytes) { return gh_dev_up(&G, h, bytes); }
static void *zeros(size_t bytes) { return gh_dev_zeros(&G, bytes); }
static float *downf(const void *d, size_t n) {
    float *h = gh_alloc(n * 4);
    gh_dev_down(&G, h, d, n * 4);
    return h;
}
static void dfree(void *d, size_t bytes) { gh_dev_free(&G, d, bytes); }

/* the device result of n floats at d against the host's, then d is freed */
static void close_f(const char *what, void *d, const float *want, size_t n, float atol,
                    float rtol) {
    float *got = downf(d, n);
    gh_close(&G, what, got, want, n, atol, rtol);
    free(got);
}
static void same_f(const char *what, void *d, const void *want, size_t bytes) {
    void *got = gh_alloc(bytes);
    gh_dev_down(&G, got, d, bytes);
    gh_same_bits(&G, what, got, want, bytes);
    free(got);
}
/* the device's 16-bit input gradient at d16 (n elements of h) against its own fp32 one at
 * df, rounded on the host: the bits a Linear's backward would round df to */
static void same_rounded(const char *what, ds_half h, void *d16, void *df, size_t n) {
    float *f = downf(df, n);
    uint16_t *want = gh_alloc(n * 2);
    ds_half_from_f32(h, want, f, n);
    same_f(what, d16, want, n * 2);
    free(f), free(want);
}
static void close_double(const char *what, const double *d, double want, double rel) {
    double got = 0;
    gh_dev_down(&G, &got, d, sizeof got);
    char line[160];
    snprintf(line, sizeof line, "%s: gpu %.17g cpu %.17g", what, got, want);
    gh_expect(&G, line, fabs(got - want) <= rel * (fabs(want) + 1.0));
}

static void test_dense(int N, int C, int OC) {
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = rnd(nx, -1, 1), *w = rnd(nw, -1, 1), *b = rnd(OC, -1, 1), *dy = rnd(ny, -1, 1);
    float *dx = rnd(nx, -1, 1), *dw = rnd(nw, -1, 1), *db = rnd(OC, -1, 1), *y = gh_alloc(ny * 4);
    void *X = up(x, nx * 4), *W = up(w, nw * 4), *Bi = up(b, OC * 4), *DY = up(dy, ny * 4);
    void *DX = up(dx, nx * 4), *DW = up(dw, nw * 4), *DB = up(db, OC * 4), *Y = zeros(ny * 4);
    CPU->matmul_forward(y, x, w, b, N, C, OC);
    DEV->matmul_forward(Y, X, W, Bi, N, C, OC);
    close_f("table matmul_forward", Y, y, ny, 2e-4f, 1e-4f);
    CPU->matmul_backward(dx, 1, dw, db, dy, x, w, N, C, OC);
    DEV->matmul_backward(DX, 1, DW, DB, DY, X, W, N, C, OC);
    close_f("table matmul_backward dinp", DX, dx, nx, 2e-4f, 1e-4f);
    close_f("table matmul_backward dweight", DW, dw, nw, 8e-4f, 1e-4f);
    close_f("table matmul_backward dbias", DB, db, OC, 1e-4f, 1e-5f);

    /* elementwise on [N, C] */
    float *a = rnd(nx, -4, 4), *o = gh_alloc(nx * 4);
    void *A = up(a, nx * 4), *O = zeros(nx * 4);
    CPU->add_forward(o, a, x, nx);
    DEV->add_forward(O, A, X, nx);
    same_f("table add_forward", O, o, nx * 4);
    CPU->accumulate(o, x, nx);
    DEV->accumulate(O, X, nx);
    CPU->scale(o, 0.37f, nx);
    DEV->scale(O, 0.37f, nx);
    same_f("table accumulate, scale", O, o, nx * 4);
    CPU->gelu_forward(o, a, nx);
    DEV->gelu_forward(O, A, nx);
    close_f("table gelu_forward", O, o, nx, 1e-6f, 1e-5f);
    gh_dev_down(&G, o, DX, nx * 4); /* the same start on both sides */
    CPU->gelu_backward(o, 1, a, x, nx);
    DEV->gelu_backward(DX, 1, A, X, nx);
    close_f("table gelu_backward", DX, o, nx, 1e-5f, 1e-5f);

    /* layernorm */
    float *lw = rnd(C, 0.5f, 1.5f), *mean = gh_alloc(N * 4), *rstd = gh_alloc(N * 4);
    void *LW = up(lw, C * 4), *MEAN = zeros(N * 4), *RSTD = zeros(N * 4);
    CPU->layernorm_forward(o, mean, rstd, a, lw, b, N, C, 1e-5f);
    DEV->layernorm_forward(O, MEAN, RSTD, A, LW, Bi, N, C, 1e-5f);
    close_f("table layernorm_forward", O, o, nx, 1e-5f, 1e-5f);
    close_f("table layernorm_forward rstd", RSTD, rstd, N, 1e-6f, 1e-5f);
    gh_dev_down(&G, o, DX, nx * 4);
    float *lwg = rnd(C, -1, 1), *lbg = rnd(C, -1, 1);
    void *LWG = up(lwg, C * 4), *LBG = up(lbg, C * 4);
    gh_dev_down(&G, mean, MEAN, N * 4); /* backward from the device's statistics */
    gh_dev_down(&G, rstd, RSTD, N * 4);
    CPU->layernorm_backward(o, 1, lwg, lbg, x, a, lw, mean, rstd, N, C);
    DEV->layernorm_backward(DX, 1, LWG, LBG, X, A, LW, MEAN, RSTD, N, C);
    close_f("table layernorm_backward dinp", DX, o, nx, 1e-5f, 1e-4f);
    close_f("table layernorm_backward dweight", LWG, lwg, C, 1e-4f, 1e-5f);
    close_f("table layernorm_backward dbias", LBG, lbg, C, 1e-4f, 1e-5f);

    free(x), free(w), free(b), free(dy), free(dx), free(dw), free(db), free(y), free(a), free(o);
    free(lw), free(mean), free(rstd), free(lwg), free(lbg);
    dfree(X, nx * 4), dfree(W, nw * 4), dfree(Bi, OC * 4), dfree(DY, ny * 4), dfree(DX, nx * 4);
    dfree(DW, nw * 4), dfree(DB, OC * 4), dfree(Y, ny * 4), dfree(A, nx * 4), dfree(O, nx * 4);
    dfree(LW, C * 4), dfree(MEAN, N * 4), dfree(RSTD, N * 4), dfree(LWG, C * 4), dfree(LBG, C * 4);
}

static void test_embedding(int N, int C, int vocab) {
    size_t nt = (size_t)vocab * C, no = (size_t)N * C;
    float *t = rnd(nt, -1, 1), *dt = rnd(nt, -1, 1), *dy = rnd(no, -1, 1), *o = gh_alloc(no * 4);
    int32_t *ids = gh_alloc((size_t)N * 4);
    for (int n = 0; n < N; n++) ids[n] = (int32_t)(gh_rand_u32(&G) % (uint32_t)(n % 3 ? vocab : 3));
    void *Tb = up(t, nt * 4), *DT = up(dt, nt * 4), *DY = up(dy, no * 4), *O = zeros(no * 4);
    void *IDS = up(ids, (size_t)N * 4);
    CPU->embedding_forward(o, ids, t, N, C);
    DEV->embedding_forward(O, IDS, Tb, N, C);
    same_f("table embedding_forward", O, o, no * 4);
    CPU->embedding_backward(dt, dy, ids, N, C);
    DEV->embedding_backward(DT, DY, IDS, N, C);
    same_f("table embedding_backward", DT, dt, nt * 4);
    free(t), free(dt), free(dy), free(o), free(ids);
    dfree(Tb, nt * 4), dfree(DT, nt * 4), dfree(DY, no * 4), dfree(O, no * 4), dfree(IDS, (size_t)N * 4);
}

static void test_attention(int B, int T, int C, int NH, float p) {
    char what[96];
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = rnd(nq, -1, 1), *dy = rnd(no, -1, 1), *dq = rnd(nq, -1, 1);
    float *o = gh_alloc(no * 4), *att = gh_alloc(na * 4), *scr = gh_alloc(na * 4);
    void *QKV = up(qkv, nq * 4), *DY = up(dy, no * 4), *DQ = up(dq, nq * 4);
    void *O = zeros(no * 4), *ATT = zeros(na * 4), *SCR = zeros(na * 4);
    ds_rng_key key = {0xABCDEF12345ull, 3, 1, 2, 777};
    if (p > 0) {
        CPU->attention_forward_dropout(o, att, qkv, B, T, C, NH, p, key);
        DEV->attention_forward_dropout(O, ATT, QKV, B, T, C, NH, p, key);
    } else {
        CPU->attention_forward(o, att, qkv, B, T, C, NH);
        DEV->attention_forward(O, ATT, QKV, B, T, C, NH);
    }
    snprintf(what, sizeof what, "table attention_forward%s T%d", p > 0 ? "_dropout" : "", T);
    close_f(what, O, o, no, 1e-5f, 1e-4f);
    dfree(ATT, na * 4); /* backward from the CPU's probabilities: only backward compared */
    ATT = up(att, na * 4);
    if (p > 0) {
        CPU->attention_backward_dropout(dq, 1, scr, dy, qkv, att, B, T, C, NH, p, key);
        DEV->attention_backward_dropout(DQ, 1, SCR, DY, QKV, ATT, B, T, C, NH, p, key);
    } else {
        CPU->attention_backward(dq, 1, scr, dy, qkv, att, B, T, C, NH);
        DEV->attention_backward(DQ, 1, SCR, DY, QKV, ATT, B, T, C, NH);
    }
    snprintf(what, sizeof what, "table attention_backward%s T%d", p > 0 ? "_dropout" : "", T);
    close_f(what, DQ, dq, nq, 1e-5f, 1e-4f);
    free(qkv), free(dy), free(dq), free(o), free(att), free(scr);
    dfree(QKV, nq * 4), dfree(DY, no * 4), dfree(DQ, nq * 4), dfree(O, no * 4);
    dfree(ATT, na * 4), dfree(SCR, na * 4);
}

/* The fused pair, with dropout p (the mask drawn per tile on both) or without: out and
 * lse forward; backward from the CPU's out and lse, so only backward is compared. The CPU
 * recomputes from qkv and lse alone; the GPU also reads out and uses scratch. */
static void test_attention_fused(int B, int T, int C, int NH, float p) {
    char what[96];
    ds_rng_key key = {0xABCDEF12345ull, 3, 1, 2, 777};
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rnd(nq, -1, 1), *dy = rnd(no, -1, 1), *dq = rnd(nq, -1, 1);
    float *o = gh_alloc(no * 4), *lse = gh_alloc(nl * 4), *scr = gh_alloc(nl * 4);
    void *QKV = up(qkv, nq * 4), *DY = up(dy, no * 4), *DQ = up(dq, nq * 4);
    void *O = zeros(no * 4), *LSE = zeros(nl * 4), *SCR = zeros(nl * 4);
    CPU->attention_forward_fused(o, lse, qkv, B, T, C, NH, p, key);
    DEV->attention_forward_fused(O, LSE, QKV, B, T, C, NH, p, key);
    snprintf(what, sizeof what, "table attention_forward_fused out T%d hs%d p%g", T, C / NH, p);
    close_f(what, O, o, no, 2e-5f, 1e-4f);
    snprintf(what, sizeof what, "table attention_forward_fused lse T%d hs%d p%g", T, C / NH, p);
    close_f(what, LSE, lse, nl, 1e-5f, 1e-5f);
    dfree(O, no * 4), dfree(LSE, nl * 4);
    O = up(o, no * 4), LSE = up(lse, nl * 4);
    CPU->attention_backward_fused(dq, 1, scr, dy, qkv, o, lse, B, T, C, NH, p, key);
    DEV->attention_backward_fused(DQ, 1, SCR, DY, QKV, O, LSE, B, T, C, NH, p, key);
    snprintf(what, sizeof what, "table attention_backward_fused T%d hs%d p%g", T, C / NH, p);
    close_f(what, DQ, dq, nq, 2e-5f, 2e-4f);
    free(qkv), free(dy), free(dq), free(o), free(lse), free(scr);
    dfree(QKV, nq * 4), dfree(DY, no * 4), dfree(DQ, nq * 4), dfree(O, no * 4);
    dfree(LSE, nl * 4), dfree(SCR, nl * 4);
}

static void test_loss(int N, int V) {
    size_t nv = (size_t)N * V;
    float *lg = rnd(nv, -8, 8), *dl = rnd(nv, -1, 1), *ls = gh_alloc((size_t)N * 4);
    int32_t *tg = gh_alloc((size_t)N * 4);
    for (int n = 0; n < N; n++) tg[n] = n % 5 == 2 ? -1 : (int32_t)(gh_rand_u32(&G) % (uint32_t)V);
    void *LG = up(lg, nv * 4), *DL = up(dl, nv * 4), *LS = zeros((size_t)N * 4), *TG = up(tg, (size_t)N * 4);
    double *SUM = zeros(sizeof(double)), sum = 0;
    CPU->crossentropy_forward(ls, lg, tg, N, V, &sum);
    DEV->crossentropy_forward(LS, LG, TG, N, V, SUM);
    close_f("table crossentropy_forward losses", LS, ls, N, 1e-5f, 1e-5f);
    close_double("table crossentropy_forward sum", SUM, sum, 1e-5);
    CPU->crossentropy_backward(dl, lg, tg, 1.0f / N, N, V);
    DEV->crossentropy_backward(DL, LG, TG, 1.0f / N, N, V);
    close_f("table crossentropy_backward", DL, dl, nv, 1e-7f, 5e-5f);
    CPU->crossentropy_forward_backward(ls, dl, lg, tg, 1.0f / N, N, V, &sum);
    DEV->crossentropy_forward_backward(LS, LG, LG, TG, 1.0f / N, N, V, SUM); /* in place */
    close_f("table crossentropy_forward_backward in place", LG, dl, nv, 1e-7f, 5e-5f);
    close_double("table crossentropy_forward_backward sum", SUM, sum, 1e-5);
    free(lg), free(dl), free(ls), free(tg);
    dfree(LG, nv * 4), dfree(DL, nv * 4), dfree(LS, (size_t)N * 4), dfree(TG, (size_t)N * 4);
    dfree(SUM, sizeof(double));
}

static void test_dropout(size_t n, float p) {
    ds_rng_key key = {77, 5, 4, 3, 1001};
    float *x = rnd(n, -1, 1), *o = rnd(n, -1, 1);
    void *X = up(x, n * 4), *O = up(o, n * 4);
    CPU->dropout_backward(o, 1, x, n, p, key); /* accumulating into o */
    DEV->dropout_backward(O, 1, X, n, p, key);
    same_f("table dropout_backward", O, o, n * 4);
    CPU->dropout_forward(o, x, n, p, key);
    DEV->dropout_forward(O, X, n, p, key);
    same_f("table dropout_forward", O, o, n * 4);
    float *f = rnd(n, -1, 1); /* the fused add: x + dropout(f), the CPU's bits */
    void *F = up(f, n * 4);
    CPU->dropout_add_forward(o, x, f, n, p, key);
    DEV->dropout_add_forward(O, X, F, n, p, key);
    same_f("table dropout_add_forward", O, o, n * 4);
    free(x), free(o), free(f);
    dfree(X, n * 4), dfree(O, n * 4), dfree(F, n * 4);
}

/* More spans than one launch takes (64), of every decay, with untouched elements between
 * them, one empty, for the adamw span entries; *count of SPANS_MAX filled. */
enum { SPANS_MAX = 150 };
static void optim_spans(size_t n, ds_decay_span *spans, int *count) {
    *count = 0;
    for (int k = 0; k < SPANS_MAX; k++) {
        size_t lo = n * (size_t)k / SPANS_MAX + 1, hi = n * (size_t)(k + 1) / SPANS_MAX;
        size_t len = k == 7 || hi < lo + 1 ? 0 : hi - lo - 1;
        spans[(*count)++] = (ds_decay_span){lo, len, k % 3 ? 0.1f : 0.0f};
    }
}

static void test_optim(size_t n) {
    float *p = rnd(n, -1, 1), *g = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
    void *P = up(p, n * 4), *Gd = up(g, n * 4), *M = up(m, n * 4), *Vd = up(v, n * 4);
    for (int t = 1; t <= 2; t++) {
        CPU->adamw_update(p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        DEV->adamw_update(P, Gd, M, Vd, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        ds_decay_span spans[SPANS_MAX];
        int ns;
        optim_spans(n, spans, &ns);
        CPU->adamw_spans(p, g, 0.5f, m, v, spans, ns, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
        DEV->adamw_spans(P, Gd, 0.5f, M, Vd, spans, ns, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
    }
    close_f("table adamw_update, adamw_spans param", P, p, n, 1e-6f, 1e-6f);
    close_f("table adamw_update, adamw_spans v", Vd, v, n, 1e-9f, 1e-6f);
    CPU->sgd_update(p, g, m, n, 0.01f, 0.9f, 1e-4f);
    DEV->sgd_update(P, Gd, M, n, 0.01f, 0.9f, 1e-4f);
    close_f("table sgd_update param", P, p, n, 1e-6f, 1e-6f);
    close_f("table sgd_update momentum", M, m, n, 1e-6f, 1e-6f);
    double *S = zeros(sizeof(double)), s = 0;
    CPU->sumsq(g, n, &s);
    DEV->sumsq(Gd, n, S);
    close_double("table sumsq", S, s, 1e-12);
    free(p), free(g), free(m), free(v);
    dfree(P, n * 4), dfree(Gd, n * 4), dfree(M, n * 4), dfree(Vd, n * 4), dfree(S, sizeof(double));
}


/* the 16-bit values at d and want, widened, within atol + one unit in the last place */
static void close_half_abs(const char *what, ds_half h, void *d, const uint16_t *want, size_t n,
                           float atol) {
    uint16_t *got = gh_alloc(n * 2);
    gh_dev_down(&G, got, d, n * 2);
    float *a = gh_alloc(n * 4), *b = gh_alloc(n * 4);
    ds_half_to_f32(h, a, got, n);
    ds_half_to_f32(h, b, want, n);
    gh_close(&G, what, a, b, n, atol, h == DS_HALF_BF16 ? 1.0f / 128 : 1.0f / 1024);
    free(got), free(a), free(b);
}

/* the 16-bit values at d widened, within one unit in the last place of want's */
static void close_half(const char *what, ds_half h, void *d, const uint16_t *want, size_t n) {
    close_half_abs(what, h, d, want, n, 1e-30f);
}

/* the cuda device's attention16 entries take no workspace (kernel_table.h) */
static void assert_dev_ws_none(size_t N, size_t C) {
    gh_expect(&G, "attention16 workspace on cuda: none",
              ds_device_attn16(G.dev) == DS_ATTN16_HALF &&
                  ds_attention16_workspace(ds_device_attn16(G.dev), 0, N, C, 1, 1, 0) == 0 &&
                  ds_attention16_workspace(ds_device_attn16(G.dev), 1, N, C, 1, 1, 1) == 0);
}

/* matmul16 on cuBLASLt against the CPU's (kernels/cpu/matmul.c): each with its own
 * workspace (ds_matmul16_workspace of its form), both in the same chunks of output
 * columns, the gradients accumulated onto the same random start */
static void test_dense16(ds_half h, int N, int C, int OC) {
    char what[96];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
#define NAME(s) (snprintf(what, sizeof what, "table %s %s %dx%dx%d", s, hn, N, C, OC), what)
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = rnd(nx, -1, 1), *dy = rnd(ny, -1, 1), *dx = rnd(nx, -1, 1), *y = gh_alloc(ny * 4);
    float *wf = rnd(nw, -1, 1), *bf = rnd(OC, -1, 1), *dwf = rnd(nw, -1, 1), *dbf = rnd(OC, -1, 1);
    uint16_t *w = gh_alloc(nw * 2), *b = gh_alloc(OC * 2);
    uint16_t *dw = gh_alloc(nw * 2), *db = gh_alloc(OC * 2);
    ds_half_from_f32(h, w, wf, nw), ds_half_from_f32(h, b, bf, OC);
    ds_half_from_f32(h, dw, dwf, nw), ds_half_from_f32(h, db, dbf, OC);
    void *X = up(x, nx * 4), *DY = up(dy, ny * 4), *DX = up(dx, nx * 4), *Y = zeros(ny * 4);
    void *W = up(w, nw * 2), *Bi = up(b, OC * 2), *DW = up(dw, nw * 2), *DB = up(db, OC * 2);
    size_t hws = ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, OC, 0);
    size_t dws = ds_matmul16_workspace(ds_device_gemm16(G.dev), 1, N, C, OC, 0);
    void *ws = gh_alloc(hws), *WS = zeros(dws);
    CPU->matmul16_forward(h, y, x, 0, w, b, N, C, OC, ws);
    DEV->matmul16_forward(h, Y, X, 0, W, Bi, N, C, OC, WS);
    close_f(NAME("matmul16_forward"), Y, y, ny, 2e-4f, 1e-4f);
    CPU->matmul16_forward(h, y, x, 0, w, NULL, N, C, OC, ws); /* out is written, not added to */
    DEV->matmul16_forward(h, Y, X, 0, W, NULL, N, C, OC, WS);
    close_f(NAME("matmul16_forward (no bias)"), Y, y, ny, 2e-4f, 1e-4f);
    CPU->matmul16_backward(h, dx, 1, dw, db, dy, x, 0, w, N, C, OC, ws);
    DEV->matmul16_backward(h, DX, 1, DW, DB, DY, X, 0, W, N, C, OC, WS);
    /* dinp sums OC products (GPT's head: 50,257, in 13 chunks): the absolute error of
     * two fp32 sums in other orders (tensor cores' accumulation truncates) grows with
     * sqrt(OC); 2e-4 holds for the 768-term sums above */
    float datol = 2e-4f * (OC > 768 ? sqrtf((float)OC / 768.0f) : 1.0f);
    close_f(NAME("matmul16_backward dinp"), DX, dx, nx, datol, 1e-4f);
    close_half_abs(NAME("matmul16_backward dweight"), h, DW, dw, nw, 8e-4f);
    close_half_abs(NAME("matmul16_backward dbias"), h, DB, db, OC, 1e-4f);
#undef NAME
    free(x), free(dy), free(dx), free(y), free(wf), free(bf), free(dwf), free(dbf);
    free(w), free(b), free(dw), free(db), free(ws);
    dfree(X, nx * 4), dfree(DY, ny * 4), dfree(DX, nx * 4), dfree(Y, ny * 4), dfree(W, nw * 2);
    dfree(Bi, OC * 2), dfree(DW, nw * 2), dfree(DB, OC * 2), dfree(WS, dws);
}

/* cross-entropy over 16-bit logits against the CPU's: losses and sum in fp32 as
 * test_loss's, d(logits) within one unit in the last place of the 16-bit type (the
 * rounding of two fp32 values within test_loss's tolerance, scaled as the gradient is);
 * forward alone, backward alone and both in place over the logits, as the criterion calls
 * them. scale: the fp16 loss scale in dloss = scale / N (gradients up to that, so fp16's
 * range is in play: 65,536 / 64 rows puts them at 1,024) */
static void test_loss16(ds_half h, int N, int V, float scale) {
    char what[96];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
#define NAME(s) (snprintf(what, sizeof what, "table %s %s %dx%d scale %g", s, hn, N, V, \
                          (double)scale), what)
    size_t nv = (size_t)N * V;
    float *lgf = rnd(nv, -8, 8), *ls = gh_alloc((size_t)N * 4);
    uint16_t *lg = gh_alloc(nv * 2), *dl = gh_alloc(nv * 2);
    ds_half_from_f32(h, lg, lgf, nv);
    int32_t *tg = gh_alloc((size_t)N * 4);
    for (int n = 0; n < N; n++) tg[n] = n % 5 == 2 ? -1 : (int32_t)(gh_rand_u32(&G) % (uint32_t)V);
    void *LG = up(lg, nv * 2), *LS = zeros((size_t)N * 4), *TG = up(tg, (size_t)N * 4);
    double *SUM = zeros(sizeof(double)), sum = 0;
    CPU->crossentropy16(h, ls, NULL, lg, tg, 0.0f, N, V, &sum);
    DEV->crossentropy16(h, LS, NULL, LG, TG, 0.0f, N, V, SUM);
    close_f(NAME("crossentropy16 forward losses"), LS, ls, N, 1e-5f, 1e-5f);
    close_double(NAME("crossentropy16 forward sum"), SUM, sum, 1e-5);
    void *DL = up(lg, nv * 2);
    float dloss = scale / (float)N;
    CPU->crossentropy16(h, NULL, dl, lg, tg, dloss, N, V, NULL);
    DEV->crossentropy16(h, NULL, DL, DL, TG, dloss, N, V, NULL); /* backward in place */
    close_half_abs(NAME("crossentropy16 backward in place"), h, DL, dl, nv, 1e-7f * scale);
    CPU->crossentropy16(h, ls, lg, lg, tg, dloss, N, V, &sum);
    DEV->crossentropy16(h, LS, LG, LG, TG, dloss, N, V, SUM); /* both, in place */
    close_half_abs(NAME("crossentropy16 in place"), h, LG, lg, nv, 1e-7f * scale);
    close_f(NAME("crossentropy16 in place losses"), LS, ls, N, 1e-5f, 1e-5f);
    close_double(NAME("crossentropy16 in place sum"), SUM, sum, 1e-5);
#undef NAME
    free(lgf), free(ls), free(lg), free(dl), free(tg);
    dfree(LG, nv * 2), dfree(DL, nv * 2), dfree(LS, (size_t)N * 4), dfree(TG, (size_t)N * 4);
    dfree(SUM, sizeof(double));
}

/* matmul16 with 16-bit activations (io16: DS_MM16_*) against the CPU's same call: a
 * 16-bit input read as it is, a 16-bit output written by the GEMM (its bias in the
 * output's type), a 16-bit output gradient read chunk by chunk in place through its
 * leading dimension; each side with its own workspace of ds_matmul16_workspace's bytes
 * for io16 (none on cuda when both are 16-bit). A 16-bit output: the rounding of two
 * fp32 sums within the GEMM tolerance, so that plus one unit in the last place. */
static void test_dense16_io(ds_half h, int N, int C, int OC, int io16) {
    char what[128];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
    int in16 = io16 & DS_MM16_IN, out16 = io16 & DS_MM16_OUT;
#define NAME(s)                                                                                \
    (snprintf(what, sizeof what, "table %s %s %dx%dx%d in %s out %s", s, hn, N, C, OC,        \
              in16 ? "16" : "32", out16 ? "16" : "32"),                                        \
     what)
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    size_t ex = in16 ? 2 : 4, ey = out16 ? 2 : 4;
    float *xf = rnd(nx, -1, 1), *dyf = rnd(ny, -1, 1), *dx = rnd(nx, -1, 1);
    float *wf = rnd(nw, -1, 1), *bf = rnd(OC, -1, 1), *dwf = rnd(nw, -1, 1), *dbf = rnd(OC, -1, 1);
    uint16_t *w = gh_alloc(nw * 2), *b = gh_alloc(OC * 2), *dw = gh_alloc(nw * 2);
    uint16_t *db = gh_alloc(OC * 2), *x16 = gh_alloc(nx * 2), *dy16 = gh_alloc(ny * 2);
    ds_half_from_f32(h, w, wf, nw), ds_half_from_f32(h, b, bf, OC);
    ds_half_from_f32(h, dw, dwf, nw), ds_half_from_f32(h, db, dbf, OC);
    ds_half_from_f32(h, x16, xf, nx), ds_half_from_f32(h, dy16, dyf, ny);
    void *x = in16 ? (void *)x16 : (void *)xf, *dy = out16 ? (void *)dy16 : (void *)dyf;
    void *y = gh_alloc(ny * ey);
    void *X = up(x, nx * ex), *DY = up(dy, ny * ey), *DX = up(dx, nx * 4), *Y = zeros(ny * ey);
    void *W = up(w, nw * 2), *Bi = up(b, OC * 2), *DW = up(dw, nw * 2), *DB = up(db, OC * 2);
    size_t hws = ds_matmul16_workspace(DS_GEMM16_F32, 0, N, C, OC, io16);
    size_t dws = ds_matmul16_workspace(ds_device_gemm16(G.dev), 0, N, C, OC, io16);
    size_t hwb = ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, OC, io16);
    size_t dwb = ds_matmul16_workspace(ds_device_gemm16(G.dev), 1, N, C, OC, io16);
    if (hwb > hws) hws = hwb;
    if (dwb > dws) dws = dwb;
    void *ws = gh_alloc(hws), *WS = dws ? zeros(dws) : NULL;
    CPU->matmul16_forward(h, y, x, io16, w, b, N, C, OC, ws);
    DEV->matmul16_forward(h, Y, X, io16, W, Bi, N, C, OC, WS);
    if (out16) close_half_abs(NAME("matmul16_forward"), h, Y, y, ny, 2e-4f);
    else close_f(NAME("matmul16_forward"), Y, y, ny, 2e-4f, 1e-4f);
    CPU->matmul16_backward(h, dx, 1, dw, db, dy, x, io16, w, N, C, OC, ws);
    DEV->matmul16_backward(h, DX, 1, DW, DB, DY, X, io16, W, N, C, OC, WS);
    float datol = 2e-4f * (OC > 768 ? sqrtf((float)OC / 768.0f) : 1.0f);
    close_f(NAME("matmul16_backward dinp"), DX, dx, nx, datol, 1e-4f);
    close_half_abs(NAME("matmul16_backward dweight"), h, DW, dw, nw, 8e-4f);
    close_half_abs(NAME("matmul16_backward dbias"), h, DB, db, OC, 1e-4f);
#undef NAME
    free(xf), free(dyf), free(dx), free(wf), free(bf), free(dwf), free(dbf), free(w), free(b);
    free(dw), free(db), free(x16), free(dy16), free(y), free(ws);
    dfree(X, nx * ex), dfree(DY, ny * ey), dfree(DX, nx * 4), dfree(Y, ny * ey);
    dfree(W, nw * 2), dfree(Bi, OC * 2), dfree(DW, nw * 2), dfree(DB, OC * 2);
    if (WS) dfree(WS, dws);
}

/* fp16 overflow as the CPU has it: gradients at 65472 (fp16's largest is 65504) plus
 * exact sums of 64 ones reach 65536, which rounds to inf in fp16 (round to nearest, no
 * saturation) on both sides, in cuBLASLt's epilogue (beta = 1) and in the bias's column
 * sums; the 16-bit sum of squares then is not finite (the loss scaler's overflow check) */
static void test_f16_overflow(void) {
    enum { N = 64, C = 64, OC = 64 };
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = gh_alloc(nx * 4), *dy = gh_alloc(ny * 4), *dx = gh_alloc(nx * 4);
    uint16_t *w = gh_alloc(nw * 2), *dw = gh_alloc(nw * 2), *db = gh_alloc(OC * 2);
    for (size_t i = 0; i < nx; i++) x[i] = 1.0f, dx[i] = 0.0f;
    for (size_t i = 0; i < ny; i++) dy[i] = 1.0f;
    for (size_t i = 0; i < nw; i++) w[i] = 0x3C00u, dw[i] = 0x7BFEu; /* 1.0, 65472 */
    for (size_t i = 0; i < OC; i++) db[i] = 0x7BFEu;
    void *X = up(x, nx * 4), *DY = up(dy, ny * 4), *DX = up(dx, nx * 4);
    void *W = up(w, nw * 2), *DW = up(dw, nw * 2), *DB = up(db, OC * 2);
    size_t hws = ds_matmul16_workspace(DS_GEMM16_F32, 1, N, C, OC, 0);
    size_t dws = ds_matmul16_workspace(ds_device_gemm16(G.dev), 1, N, C, OC, 0);
    void *ws = gh_alloc(hws), *WS = zeros(dws);
    CPU->matmul16_backward(DS_HALF_F16, dx, 1, dw, db, dy, x, 0, w, N, C, OC, ws);
    DEV->matmul16_backward(DS_HALF_F16, DX, 1, DW, DB, DY, X, 0, W, N, C, OC, WS);
    gh_expect(&G, "f16 overflow: the CPU's dweight and dbias are inf", dw[0] == 0x7C00u && db[0] == 0x7C00u);
    same_f("f16 overflow: matmul16_backward dweight (inf, not saturated)", DW, dw, nw * 2);
    same_f("f16 overflow: matmul16_backward dbias (inf)", DB, db, OC * 2);
    double *S = zeros(sizeof(double)), s = 0, got = 0;
    CPU->half_sumsq(DS_HALF_F16, dw, nw, &s);
    DEV->half_sumsq(DS_HALF_F16, DW, nw, S);
    gh_dev_down(&G, &got, S, sizeof got);
    char line[160];
    snprintf(line, sizeof line, "f16 overflow: half_sumsq not finite (gpu %g, cpu %g)", got, s);
    gh_expect(&G, line, !isfinite(got) && !isfinite(s));
    free(x), free(dy), free(dx), free(w), free(dw), free(db), free(ws);
    dfree(X, nx * 4), dfree(DY, ny * 4), dfree(DX, nx * 4), dfree(W, nw * 2), dfree(DW, nw * 2);
    dfree(DB, OC * 2), dfree(WS, dws), dfree(S, sizeof(double));
}

/* the embeddings and LayerNorm with 16-bit parameters against the CPU's (their
 * workspaces from kernel_table.h, one size for both); repeated ids and untouched rows
 * (ids below vocab / 4 at every third position) */
static void test_params16(ds_half h, int N, int C, int vocab, int B, int T) {
    char what[96];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
#define NAME(s) (snprintf(what, sizeof what, "table %s %s", s, hn), what)
    size_t nt = (size_t)vocab * C, no = (size_t)N * C, tc = (size_t)T * C, nb = B * tc;
    float *tf = rnd(nt, -1, 1), *dtf = rnd(nt, -1, 1), *dy = rnd(no, -1, 1), *o = gh_alloc(no * 4);
    uint16_t *t = gh_alloc(nt * 2), *dt = gh_alloc(nt * 2);
    ds_half_from_f32(h, t, tf, nt), ds_half_from_f32(h, dt, dtf, nt);
    int32_t *ids = gh_alloc((size_t)N * 4);
    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)(gh_rand_u32(&G) % (uint32_t)(n % 3 ? vocab / 2 : vocab / 4));
    void *Tb = up(t, nt * 2), *DT = up(dt, nt * 2), *DY = up(dy, no * 4), *O = zeros(no * 4);
    void *IDS = up(ids, (size_t)N * 4);
    size_t wsb = ds_embedding16_workspace((size_t)N, (size_t)C) + ds_layernorm16_workspace(1, (size_t)C);
    void *ws = gh_alloc(wsb), *WS = zeros(wsb);
    CPU->embedding16_forward(h, o, ids, t, N, C);
    DEV->embedding16_forward(h, O, IDS, Tb, N, C);
    same_f(NAME("embedding16_forward"), O, o, no * 4);
    CPU->embedding16_backward(h, dt, dy, ids, N, C, ws);
    DEV->embedding16_backward(h, DT, DY, IDS, N, C, WS);
    same_f(NAME("embedding16_backward"), DT, dt, nt * 2);

    float *x = rnd(nb, -1, 1), *px = gh_alloc(nb * 4), *pdy = rnd(nb, -1, 1);
    void *X = up(x, nb * 4), *PX = zeros(nb * 4), *PDY = up(pdy, nb * 4);
    CPU->posemb16_forward(h, px, x, t, B, T, C); /* the table's first T rows */
    DEV->posemb16_forward(h, PX, X, Tb, B, T, C);
    same_f(NAME("posemb16_forward"), PX, px, nb * 4);
    CPU->posemb16_backward(h, dt, pdy, B, T, C);
    DEV->posemb16_backward(h, DT, PDY, B, T, C);
    same_f(NAME("posemb16_backward"), DT, dt, tc * 2);

    /* LayerNorm over the B*T rows of x: weight and bias from the table's rows 0, 1, their
     * gradients into rows 2, 3 */
    int R = B * T;
    float *mean = gh_alloc((size_t)R * 4), *rstd = gh_alloc((size_t)R * 4);
    void *MEAN = zeros((size_t)R * 4), *RSTD = zeros((size_t)R * 4);
    CPU->layernorm16_forward(h, px, mean, rstd, x, t, t + C, R, C, 1e-5f, 0, ws);
    DEV->layernorm16_forward(h, PX, MEAN, RSTD, X, Tb, (uint16_t *)Tb + C, R, C, 1e-5f, 0, WS);
    close_f(NAME("layernorm16_forward"), PX, px, nb, 1e-5f, 1e-5f);
    close_f(NAME("layernorm16_forward rstd"), RSTD, rstd, R, 1e-6f, 1e-5f);
    gh_dev_down(&G, mean, MEAN, (size_t)R * 4); /* backward from the device's statistics */
    gh_dev_down(&G, rstd, RSTD, (size_t)R * 4);
    gh_dev_down(&G, px, PX, nb * 4); /* and from the same dinp */
    uint16_t *DTw = (uint16_t *)DT + 2 * C, *DTb = (uint16_t *)DT + 3 * C;
    CPU->layernorm16_backward(h, px, 1, dt + 2 * C, dt + 3 * C, pdy, x, t, mean, rstd, R, C, ws);
    DEV->layernorm16_backward(h, PX, 1, DTw, DTb, PDY, X, Tb, MEAN, RSTD, R, C, WS);
    close_f(NAME("layernorm16_backward dinp"), PX, px, nb, 1e-5f, 1e-4f);
    close_half_abs(NAME("layernorm16_backward dweight"), h, DTw, dt + 2 * C, C, 1e-4f);
    close_half_abs(NAME("layernorm16_backward dbias"), h, DTb, dt + 3 * C, C, 1e-4f);
#undef NAME
    free(tf), free(dtf), free(dy), free(o), free(t), free(dt), free(ids), free(ws), free(x);
    free(px), free(pdy), free(mean), free(rstd);
    dfree(Tb, nt * 2), dfree(DT, nt * 2), dfree(DY, no * 4), dfree(O, no * 4);
    dfree(IDS, (size_t)N * 4), dfree(WS, wsb), dfree(X, nb * 4), dfree(PDY, nb * 4);
    dfree(PX, nb * 4), dfree(MEAN, (size_t)R * 4), dfree(RSTD, (size_t)R * 4);
}

/* The entries that take and give 16-bit activations (gelu16, layernorm16's 16-bit
 * output, attention16) against the CPU's: their fp32 tolerances above, plus one unit in
 * the 16-bit type's last place where the result is 16-bit (two fp32 values that differ
 * in their last bits may round apart). The cuda entries take no workspace
 * (DS_ATTN16_HALF); the CPU's gets its own. Attention's backward reads the forward's
 * output for its row term (the CPU recomputes it): compared against the CPU with an fp32
 * output, and with a 16-bit output against the device's own run on that output widened,
 * bit for bit. */
static void test_acts16(ds_half h, int B, int T, int C, int NH, float p) {
    char what[96];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
    ds_rng_key key = {0xABCDEF12345ull, 3, 1, 2, 777};
#define NAME(s) \
    (snprintf(what, sizeof what, "table %s %s T%d hs%d p%g", s, hn, T, C / NH, p), what)
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    size_t N = (size_t)B * T;
    float *qf = rnd(nq, -1, 1), *dy = rnd(no, -1, 1), *dq = rnd(nq, -1, 1); /* as test_attention_fused */
    uint16_t *q16 = gh_alloc(nq * 2), *o16 = gh_alloc(no * 2), *g16 = gh_alloc(nq * 2);
    ds_half_from_f32(h, q16, qf, nq);
    float *of = gh_alloc(nq * 4), *lse = gh_alloc(nl * 4), *scr = gh_alloc(nl * 4);
    void *Q16 = up(q16, nq * 2), *QF = up(qf, nq * 4), *DY = up(dy, no * 4), *DQ = up(dq, nq * 4);
    void *O16 = zeros(no * 2), *OF = zeros(nq * 4), *LSE = zeros(nl * 4), *SCR = zeros(nl * 4);
    void *G16 = zeros(nq * 2);
    size_t wsb = ds_attention16_workspace(DS_ATTN16_F32, 0, N, (size_t)C, 1, 1, 0);
    void *ws = gh_alloc(wsb);
    assert_dev_ws_none(N, (size_t)C);

    /* GELU over qkv's elements: 16-bit in and out, 16-bit in, 16-bit out; backward */
    CPU->gelu16_forward(h, g16, q16, nq, 1, 1);
    DEV->gelu16_forward(h, G16, Q16, nq, 1, 1);
    close_half_abs(NAME("gelu16_forward"), h, G16, g16, nq, 1e-6f);
    CPU->gelu16_forward(h, of, q16, nq, 1, 0);
    DEV->gelu16_forward(h, OF, Q16, nq, 1, 0);
    close_f(NAME("gelu16_forward (16-bit in)"), OF, of, nq, 1e-6f, 1e-5f);
    CPU->gelu16_forward(h, g16, qf, nq, 0, 1);
    DEV->gelu16_forward(h, G16, QF, nq, 0, 1);
    close_half_abs(NAME("gelu16_forward (16-bit out)"), h, G16, g16, nq, 1e-6f);
    gh_dev_down(&G, of, DQ, nq * 4); /* the same start on both sides */
    float *gq = rnd(nq, -1, 1);
    void *GQ = up(gq, nq * 4);
    CPU->gelu16_backward(h, of, 1, q16, gq, nq, 0);
    DEV->gelu16_backward(h, DQ, 1, Q16, GQ, nq, 0);
    close_f(NAME("gelu16_backward"), DQ, of, nq, 1e-5f, 1e-5f);
    gh_dev_free(&G, DQ, nq * 4);
    DQ = zeros(nq * 4); /* a 16-bit dinp: the device's fp32 one rounded once */
    DEV->gelu16_backward(h, DQ, 0, Q16, GQ, nq, 0);
    DEV->gelu16_backward(h, G16, 0, Q16, GQ, nq, 1);
    same_rounded(NAME("gelu16_backward (16-bit dinp)"), h, G16, DQ, nq);
    gh_dev_free(&G, DQ, nq * 4);
    DQ = up(dq, nq * 4);

    /* LayerNorm over qkv's elements as [3N, C] rows, into a 16-bit output */
    int R = (int)(3 * N);
    float *lw = rnd((size_t)C, 0.5f, 1.5f), *mean = gh_alloc((size_t)R * 4);
    float *rstd = gh_alloc((size_t)R * 4);
    uint16_t *w16 = gh_alloc((size_t)C * 4);
    ds_half_from_f32(h, w16, lw, (size_t)C);
    ds_half_from_f32(h, w16 + C, dy, (size_t)C); /* the bias */
    void *W16 = up(w16, (size_t)C * 4), *MEAN = zeros((size_t)R * 4), *RSTD = zeros((size_t)R * 4);
    void *lws = gh_alloc(ds_layernorm16_workspace(0, (size_t)C));
    CPU->layernorm16_forward(h, g16, mean, rstd, qf, w16, w16 + C, R, C, 1e-5f, 1, lws);
    DEV->layernorm16_forward(h, G16, MEAN, RSTD, QF, W16, (uint16_t *)W16 + C, R, C, 1e-5f, 1,
                             NULL);
    close_half_abs(NAME("layernorm16_forward (16-bit out)"), h, G16, g16, nq, 1e-5f);
    close_f(NAME("layernorm16_forward (16-bit out) rstd"), RSTD, rstd, (size_t)R, 1e-6f, 1e-5f);

    /* attention: 16-bit qkv and out; 16-bit qkv, fp32 out (p: attention dropout, the same
     * mask on both) */
    CPU->attention16_forward_fused(h, o16, lse, q16, B, T, C, NH, p, key, 1, 1, ws);
    DEV->attention16_forward_fused(h, O16, LSE, Q16, B, T, C, NH, p, key, 1, 1, NULL);
    close_half_abs(NAME("attention16_forward_fused out"), h, O16, o16, no, 2e-5f);
    close_f(NAME("attention16_forward_fused lse"), LSE, lse, nl, 1e-5f, 1e-5f);
    CPU->attention16_forward_fused(h, of, lse, q16, B, T, C, NH, p, key, 1, 0, ws);
    DEV->attention16_forward_fused(h, OF, LSE, Q16, B, T, C, NH, p, key, 1, 0, NULL);
    close_f(NAME("attention16_forward_fused (16-bit qkv) out"), OF, of, no, 2e-5f, 1e-4f);
    dfree(LSE, nl * 4), dfree(OF, nq * 4);
    LSE = up(lse, nl * 4), OF = up(of, no * 4); /* backward from the CPU's out and lse */
    CPU->attention16_backward_fused(h, dq, 1, scr, dy, q16, of, lse, B, T, C, NH, p, key, 1, 0, 0,
                                    ws);
    DEV->attention16_backward_fused(h, DQ, 1, SCR, DY, Q16, OF, LSE, B, T, C, NH, p, key, 1, 0, 0,
                                    NULL);
    close_f(NAME("attention16_backward_fused (16-bit qkv)"), DQ, dq, nq, 2e-5f, 2e-4f);
    /* a 16-bit out read as it is = that out widened, on the device */
    float *ow = gh_alloc(no * 4);
    ds_half_from_f32(h, o16, of, no);
    ds_half_to_f32(h, ow, o16, no);
    dfree(O16, no * 2), dfree(OF, no * 4);
    O16 = up(o16, no * 2), OF = up(ow, no * 4);
    void *DQ2 = up(dq, nq * 4);
    gh_dev_free(&G, DQ, nq * 4);
    DQ = up(dq, nq * 4);
    DEV->attention16_backward_fused(h, DQ, 1, SCR, DY, Q16, O16, LSE, B, T, C, NH, p, key, 1, 1, 0,
                                    NULL);
    DEV->attention16_backward_fused(h, DQ2, 1, SCR, DY, Q16, OF, LSE, B, T, C, NH, p, key, 1, 0, 0,
                                    NULL);
    float *dq2 = downf(DQ2, nq);
    same_f(NAME("attention16_backward_fused (16-bit out)"), DQ, dq2, nq * 4);
    /* a 16-bit dqkv (written over garbage): the device's fp32 one rounded once */
    DEV->attention16_backward_fused(h, DQ2, 0, SCR, DY, Q16, O16, LSE, B, T, C, NH, p, key, 1, 1, 0,
                                    NULL);
    DEV->attention16_backward_fused(h, G16, 0, SCR, DY, Q16, O16, LSE, B, T, C, NH, p, key, 1, 1, 1,
                                    NULL);
    same_rounded(NAME("attention16_backward_fused (16-bit dqkv)"), h, G16, DQ2, nq);
#undef NAME
    free(qf), free(dy), free(dq), free(q16), free(o16), free(g16), free(of), free(lse), free(scr);
    free(ws), free(gq), free(lw), free(mean), free(rstd), free(w16), free(lws), free(ow), free(dq2);
    dfree(Q16, nq * 2), dfree(QF, nq * 4), dfree(DY, no * 4), dfree(DQ, nq * 4);
    dfree(O16, no * 2), dfree(OF, no * 4), dfree(LSE, nl * 4), dfree(SCR, nl * 4);
    dfree(G16, nq * 2), dfree(GQ, nq * 4), dfree(W16, (size_t)C * 4), dfree(MEAN, (size_t)R * 4);
    dfree(RSTD, (size_t)R * 4), dfree(DQ2, nq * 4);
}

static void test_half(ds_half h, size_t n) {
    char what[96];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
    float *x = rnd(n, -3, 3), *y = rnd(n, -3, 3);
    uint16_t *a = gh_alloc(n * 2), *b = gh_alloc(n * 2);
    void *X = up(x, n * 4), *A = zeros(n * 2), *Bd = zeros(n * 2);
#define NAME(s) (snprintf(what, sizeof what, "table %s %s", s, hn), what)
    CPU->half_from_f32(h, a, x, n);
    DEV->half_from_f32(h, A, X, n);
    same_f(NAME("half_from_f32"), A, a, n * 2);
    CPU->half_from_f32(h, b, y, n);
    gh_dev_free(&G, Bd, n * 2);
    Bd = up(b, n * 2);
    float *w = gh_alloc(n * 4);
    void *W = zeros(n * 4);
    CPU->half_to_f32(h, w, a, n);
    DEV->half_to_f32(h, W, A, n);
    same_f(NAME("half_to_f32"), W, w, n * 4);
    void *Y = up(y, n * 4);
    CPU->half_acc_f32(h, a, y, n);
    DEV->half_acc_f32(h, A, Y, n);
    dfree(Y, n * 4);
    same_f(NAME("half_acc_f32"), A, a, n * 2);
    CPU->half_add(h, a, a, b, n);
    DEV->half_add(h, A, A, Bd, n);
    same_f(NAME("half_add (out = a)"), A, a, n * 2);
    CPU->half_scale(h, a, 0.125f, n);
    DEV->half_scale(h, A, 0.125f, n);
    same_f(NAME("half_scale"), A, a, n * 2);
    double *S = zeros(sizeof(double)), s = 0;
    CPU->half_sumsq(h, a, n, &s);
    DEV->half_sumsq(h, A, n, S);
    close_double(NAME("half_sumsq"), S, s, 1e-12);

    /* optimizer steps on a 16-bit working copy: w = a, gradient b */
    float *master = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
    void *MA = up(master, n * 4), *M = up(m, n * 4), *Vd = up(v, n * 4);
    ds_decay_span spans[SPANS_MAX];
    int ns;
    optim_spans(n, spans, &ns);
    for (int t = 1; t <= 2; t++) {
        CPU->adamw_half_spans(h, a, b, 0.25f, master, m, v, spans, ns, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
        DEV->adamw_half_spans(h, A, Bd, 0.25f, MA, M, Vd, spans, ns, 1e-3f, 0.9f, 0.95f, 1e-8f, t);
    }
    close_f(NAME("adamw_half_spans master"), MA, master, n, 1e-6f, 1e-6f);
    close_half(NAME("adamw_half_spans working copy"), h, A, a, n);
    CPU->sgd_update_half(h, a, b, 0.5f, master, m, n, 0.01f, 0.9f, 1e-4f);
    DEV->sgd_update_half(h, A, Bd, 0.5f, MA, M, n, 0.01f, 0.9f, 1e-4f);
    close_f(NAME("sgd_update_half master"), MA, master, n, 1e-6f, 1e-6f);
    close_half(NAME("sgd_update_half working copy"), h, A, a, n);
#undef NAME
    free(x), free(y), free(a), free(b), free(w), free(master), free(m), free(v);
    dfree(X, n * 4), dfree(A, n * 2), dfree(Bd, n * 2), dfree(W, n * 4), dfree(S, sizeof(double));
    dfree(MA, n * 4), dfree(M, n * 4), dfree(Vd, n * 4);
}

int main(void) {
    gh_init_device(&G, "test_gpu_table");
    DEV = G.dev->k;
    test_dense(64, 48, 40);
    test_dense(1000, 768, 3072);
    test_dense16(DS_HALF_BF16, 64, 48, 40);
    test_dense16(DS_HALF_BF16, 1000, 768, 3072);
    test_dense16(DS_HALF_F16, 1000, 768, 3072);
    /* GPT-2's head: 12 chunks of DS_MATMUL16_COLS output columns and one of 1,105 */
    test_dense16(DS_HALF_BF16, 64, 768, 50257);
    test_dense16(DS_HALF_F16, 512, 768, 50257);
    for (int io = 1; io <= (DS_MM16_IN | DS_MM16_OUT); io++) {
        test_dense16_io(DS_HALF_BF16, 64, 48, 40, io);
        test_dense16_io(DS_HALF_F16, 1000, 768, 3072, io);
    }
    /* GPT's head with 16-bit logits: 16-bit input, output and output gradient; the
     * output gradient's rows (50,257 elements) are 2 bytes aligned, so it is copied chunk
     * by chunk into rows padded to 8 elements (the last chunk's 1,105 to 1,112) */
    test_dense16_io(DS_HALF_BF16, 64, 768, 50257, DS_MM16_IN | DS_MM16_OUT);
    test_dense16_io(DS_HALF_F16, 512, 768, 50257, DS_MM16_IN | DS_MM16_OUT);
    /* rows 16-byte aligned and more than one chunk: read in place through ld = 8,200,
     * the last chunk's 8 columns at an offset of 8,192 elements */
    test_dense16_io(DS_HALF_BF16, 64, 64, 8200, DS_MM16_IN | DS_MM16_OUT);
    /* an odd OC inside one chunk: an fp32 or a 16-bit output gradient copied with its
     * rows padded (37 -> 40), a 16-bit output written with ld = 37 */
    test_dense16_io(DS_HALF_BF16, 64, 48, 37, 0);
    test_dense16_io(DS_HALF_F16, 64, 48, 37, DS_MM16_IN | DS_MM16_OUT);
    /* the weight gradient's GEMM with m x n small and k = N large, where the heuristic
     * splits K: its partial sums must add in fp32, not in the 16-bit D (one rounding) */
    test_dense16_io(DS_HALF_BF16, 16384, 64, 64, DS_MM16_IN | DS_MM16_OUT);
    test_f16_overflow();
    test_embedding(1024, 768, 1000);
    test_params16(DS_HALF_BF16, 1024, 768, 1000, 4, 256);
    test_params16(DS_HALF_F16, 1024, 768, 1000, 4, 256);
    test_params16(DS_HALF_BF16, 37, 50, 20, 3, 5); /* odd sizes */
    test_attention(2, 64, 128, 4, 0.0f);
    test_attention(2, 64, 128, 4, 0.1f);
    test_attention(1, 300, 96, 2, 0.2f);
    test_attention_fused(2, 64, 128, 4, 0.0f);  /* head size 32 */
    test_attention_fused(1, 300, 128, 2, 0.0f); /* head size 64, T past the backward's chunks */
    test_attention_fused(2, 67, 256, 2, 0.0f);  /* head size 128 */
    test_attention_fused(4, 32, 64, 4, 0.0f);   /* head size 16: examples/gpt/tiny.lua */
    /* attention dropout (GPT-2's attn_pdrop 0.1): every head size, T past the tiles */
    test_attention_fused(2, 64, 128, 4, 0.1f);
    test_attention_fused(1, 300, 128, 2, 0.1f);
    test_attention_fused(2, 67, 256, 2, 0.2f);
    test_attention_fused(4, 32, 64, 4, 0.1f);
    test_acts16(DS_HALF_BF16, 2, 64, 128, 4, 0.0f); /* head size 32 */
    test_acts16(DS_HALF_F16, 1, 300, 128, 2, 0.0f); /* head size 64, T past the backward's chunks */
    test_acts16(DS_HALF_BF16, 2, 67, 256, 2, 0.0f); /* head size 128 */
    /* the flash kernels are instantiated per element type and head size: GPT-2's head
     * size 64 in bf16, and 128 in fp16; with dropout too */
    test_acts16(DS_HALF_BF16, 1, 300, 128, 2, 0.0f);
    test_acts16(DS_HALF_F16, 2, 67, 256, 2, 0.0f);
    test_acts16(DS_HALF_BF16, 1, 300, 128, 2, 0.1f);
    test_acts16(DS_HALF_F16, 2, 67, 256, 2, 0.1f);
    test_loss(64, 50257);
    test_loss(7, 5);
    test_loss16(DS_HALF_BF16, 64, 50257, 1.0f);
    test_loss16(DS_HALF_F16, 64, 50257, 1.0f);
    test_loss16(DS_HALF_F16, 64, 50257, 65536.0f); /* fp16 with the loss scaler's start */
    test_loss16(DS_HALF_BF16, 7, 5, 1.0f);
    test_dropout(1000003, 0.1f);
    test_optim(1000003);
    test_half(DS_HALF_BF16, 1000003);
    test_half(DS_HALF_F16, 1000003);
    test_half(DS_HALF_BF16, 7);
    return gh_finish(&G);
}
