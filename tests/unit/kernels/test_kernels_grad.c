/* Every differentiable CPU kernel against a double-precision reference forward written
 * here, and every backward against central finite differences of that forward. Gradient
 * buffers start non-zero, so the checks also assert the accumulate (+=) contract. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kernels.h"
#include "kernels_testutil.h"

#define FWD_ATOL 2e-5
#define FWD_RTOL 2e-4
#define BWD_ATOL 2e-4
#define BWD_RTOL 2e-3

/* got must equal base + fd (the kernel added its gradient to what was there). */
static void expect_accumulated(const char *what, const float *got, const float *base,
                               const double *fd, size_t n) {
    double *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = (double)base[i] + fd[i];
    assert_int_equal(tu_mismatch(what, got, want, n, BWD_ATOL, BWD_RTOL), 0);
    free(want);
}

static double dot_fd(const float *grad, const float *base, const double *d, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += ((double)grad[i] - base[i]) * d[i];
    return s;
}

static void expect_close(const char *what, double got, double want, double rtol) {
    if (!(fabs(got - want) <= rtol * (fabs(want) + 1e-3))) {
        fprintf(stderr, "%s: got %.9g want %.9g\n", what, got, want);
        fail();
    }
}

/* ---- matmul ----------------------------------------------------------------------- */
typedef struct { int N, C, OC; } mm_shape;

static void ref_matmul(const double *x, double *y, const void *ctx) {
    const mm_shape *s = ctx;
    const double *inp = x, *w = x + s->N * s->C, *b = w + s->OC * s->C;
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->OC; o++) {
            double acc = b[o];
            for (int c = 0; c < s->C; c++) acc += inp[n * s->C + c] * w[o * s->C + c];
            y[n * s->OC + o] = acc;
        }
}

static void check_matmul(int N, int C, int OC, int full_fd) {
    mm_shape s = {N, C, OC};
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    size_t nx = ni + nw + OC;
    float *x = tu_randf(nx, -1.0f, 1.0f);
    float *out = tu_randf(ny, 0, 1), *dout = tu_randf(ny, -1.0f, 1.0f);
    ds_matmul_forward(out, x, x + ni, x + ni + nw, N, C, OC);
    double *xd = tu_to_double(x, nx), *yd = malloc(ny * sizeof *yd);
    ref_matmul(xd, yd, &s);
    assert_int_equal(tu_mismatch("matmul out", out, yd, ny, FWD_ATOL, FWD_RTOL), 0);

    float *base = tu_randf(nx, -0.5f, 0.5f), *grad = tu_copyf(base, nx);
    ds_matmul_backward(grad, 1, grad + ni, grad + ni + nw, dout, x, x + ni, N, C, OC);
    double *g = tu_to_double(dout, ny);
    if (full_fd) {
        double *fd = malloc(nx * sizeof *fd);
        tu_fd_grad(ref_matmul, &s, xd, nx, g, ny, fd);
        expect_accumulated("matmul dinp", grad, base, fd, ni);
        expect_accumulated("matmul dweight", grad + ni, base + ni, fd + ni, nw);
        expect_accumulated("matmul dbias", grad + ni + nw, base + ni + nw, fd + ni + nw, OC);
        free(fd);
    } else {
        for (int k = 0; k < 2; k++) {
            float *df = tu_randf(nx, -1.0f, 1.0f);
            double *d = tu_to_double(df, nx);
            expect_close("matmul directional", dot_fd(grad, base, d, nx),
                         tu_fd_dir(ref_matmul, &s, xd, d, nx, g, ny), 1e-4);
            free(df);
            free(d);
        }
    }
    /* NULL gradients are skipped; the others still accumulate the same values */
    float *only_w = tu_copyf(base, nx);
    ds_matmul_backward(NULL, 1, only_w + ni, NULL, dout, x, x + ni, N, C, OC);
    assert_memory_equal(only_w, base, ni * sizeof(float));
    assert_memory_equal(only_w + ni + nw, base + ni + nw, OC * sizeof(float));
    free(only_w);
    free(x), free(out), free(dout), free(xd), free(yd), free(base), free(grad), free(g);
}

static void test_matmul_small(void **state) {
    (void)state;
    tu_seed(1);
    check_matmul(5, 7, 6, 1);
    check_matmul(1, 3, 1, 1);
}

static void test_matmul_large(void **state) {
    (void)state;
    tu_seed(2);
    check_matmul(72, 100, 301, 0); /* > 4 MFLOP: split over the threads, odd block edges */
}

static void test_matmul_no_bias(void **state) {
    (void)state;
    tu_seed(3);
    int N = 4, C = 5, OC = 3;
    float *inp = tu_randf(N * C, -1, 1), *w = tu_randf(OC * C, -1, 1);
    float *zero = calloc(OC, sizeof(float)), out1[12], out2[12];
    ds_matmul_forward(out1, inp, w, NULL, N, C, OC);
    ds_matmul_forward(out2, inp, w, zero, N, C, OC);
    assert_memory_equal(out1, out2, sizeof out1);
    free(inp), free(w), free(zero);
}

/* ---- gelu ------------------------------------------------------------------------- */
static void ref_gelu(const double *x, double *y, const void *ctx) {
    size_t n = *(const size_t *)ctx;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = 0.5 * v * (1.0 + tanh(sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    }
}

static void check_gelu(size_t n) {
    float *x = tu_randf(n, -6.0f, 6.0f), *out = tu_randf(n, 0, 1), *dout = tu_randf(n, -1, 1);
    x[0] = 0.0f;
    ds_gelu_forward(out, x, n);
    double *xd = tu_to_double(x, n), *yd = calloc(n, sizeof *yd), *fd = calloc(n, sizeof *fd);
    ref_gelu(xd, yd, &n);
    assert_int_equal(tu_mismatch("gelu out", out, yd, n, FWD_ATOL, FWD_RTOL), 0);
    float *base = tu_randf(n, -1, 1), *grad = tu_copyf(base, n);
    ds_gelu_backward(grad, 1, x, dout, n);
    double *g = tu_to_double(dout, n);
    tu_fd_grad(ref_gelu, &n, xd, n, g, n, fd);
    expect_accumulated("gelu dinp", grad, base, fd, n);
    free(x), free(out), free(dout), free(xd), free(yd), free(fd), free(base), free(grad), free(g);
}

static void test_gelu(void **state) {
    (void)state;
    tu_seed(4);
    check_gelu(37);
    check_gelu(1000); /* crosses SIMD widths and tails */
}

/* ---- elementwise ------------------------------------------------------------------ */
static void test_add_accumulate_scale(void **state) {
    (void)state;
    tu_seed(5);
    size_t n = 100003;
    float *a = tu_randf(n, -1, 1), *b = tu_randf(n, -1, 1), *o = tu_randf(n, 0, 1);
    float *acc = tu_copyf(a, n);
    ds_add_forward(o, a, b, n);
    ds_accumulate(acc, b, n);
    for (size_t i = 0; i < n; i++) {
        assert_true(o[i] == a[i] + b[i]);
        assert_true(acc[i] == a[i] + b[i]);
    }
    ds_scale(acc, 0.5f, n);
    for (size_t i = 0; i < n; i++) assert_true(acc[i] == (a[i] + b[i]) * 0.5f);
    free(a), free(b), free(o), free(acc);
}

/* ---- layernorm -------------------------------------------------------------------- */
typedef struct { int N, C; } ln_shape;

static void ref_layernorm(const double *x, double *y, const void *ctx) {
    const ln_shape *s = ctx;
    const double *inp = x, *w = x + s->N * s->C, *b = w + s->C;
    for (int n = 0; n < s->N; n++) {
        const double *r = inp + n * s->C;
        double m = 0, v = 0;
        for (int c = 0; c < s->C; c++) m += r[c];
        m /= s->C;
        for (int c = 0; c < s->C; c++) v += (r[c] - m) * (r[c] - m);
        v /= s->C;
        double rs = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < s->C; c++) y[n * s->C + c] = (r[c] - m) * rs * w[c] + b[c];
    }
}

static void check_layernorm(int N, int C, int full_fd) {
    ln_shape s = {N, C};
    size_t ni = (size_t)N * C, nx = ni + 2 * (size_t)C;
    float *x = tu_randf(nx, -2.0f, 2.0f);
    for (size_t i = 0; i < ni; i++) x[i] += (float)(i % 3); /* non-zero mean */
    float *out = tu_randf(ni, 0, 1), *mean = malloc(N * sizeof(float)),
          *rstd = malloc(N * sizeof(float)), *dout = tu_randf(ni, -1, 1);
    ds_layernorm_forward(out, mean, rstd, x, x + ni, x + ni + C, N, C, 1e-5f);
    double *xd = tu_to_double(x, nx), *yd = malloc(ni * sizeof *yd);
    ref_layernorm(xd, yd, &s);
    assert_int_equal(tu_mismatch("layernorm out", out, yd, ni, FWD_ATOL, FWD_RTOL), 0);
    for (int n = 0; n < N; n++) {
        double m = 0;
        for (int c = 0; c < C; c++) m += xd[n * C + c];
        expect_close("layernorm mean", mean[n], m / C, 1e-5);
    }
    float *base = tu_randf(nx, -0.5f, 0.5f), *grad = tu_copyf(base, nx);
    ds_layernorm_backward(grad, 1, grad + ni, grad + ni + C, dout, x, x + ni, mean, rstd, N, C);
    double *g = tu_to_double(dout, ni);
    if (full_fd) {
        double *fd = malloc(nx * sizeof *fd);
        tu_fd_grad(ref_layernorm, &s, xd, nx, g, ni, fd);
        expect_accumulated("layernorm dinp", grad, base, fd, ni);
        expect_accumulated("layernorm dweight", grad + ni, base + ni, fd + ni, C);
        expect_accumulated("layernorm dbias", grad + ni + C, base + ni + C, fd + ni + C, C);
        free(fd);
    } else {
        for (int k = 0; k < 2; k++) {
            float *df = tu_randf(nx, -1, 1);
            double *d = tu_to_double(df, nx);
            expect_close("layernorm directional", dot_fd(grad, base, d, nx),
                         tu_fd_dir(ref_layernorm, &s, xd, d, nx, g, ni), 1e-4);
            free(df), free(d);
        }
    }
    free(x), free(out), free(mean), free(rstd), free(dout), free(xd), free(yd), free(base),
        free(grad), free(g);
}

static void test_layernorm(void **state) {
    (void)state;
    tu_seed(6);
    check_layernorm(4, 9, 1);
    check_layernorm(3, 33, 1);
    check_layernorm(64, 768, 0);
}

/* ---- embedding -------------------------------------------------------------------- */
typedef struct { int N, C; const int32_t *ids; } emb_ctx;

static void ref_embedding(const double *x, double *y, const void *ctx) {
    const emb_ctx *e = ctx;
    for (int n = 0; n < e->N; n++)
        for (int c = 0; c < e->C; c++) y[n * e->C + c] = x[e->ids[n] * e->C + c];
}

static void test_embedding(void **state) {
    (void)state;
    tu_seed(7);
    int V = 6, N = 9, C = 5;
    int32_t ids[9] = {0, 3, 3, 5, 1, 3, 0, 2, 5}; /* repeats: rows must accumulate */
    emb_ctx e = {N, C, ids};
    size_t nt = (size_t)V * C, ny = (size_t)N * C;
    float *table = tu_randf(nt, -1, 1), *out = tu_randf(ny, 0, 1), *dout = tu_randf(ny, -1, 1);
    ds_embedding_forward(out, ids, table, N, C);
    for (int n = 0; n < N; n++)
        assert_memory_equal(out + n * C, table + ids[n] * C, C * sizeof(float));
    float *base = tu_randf(nt, -1, 1), *grad = tu_copyf(base, nt);
    ds_embedding_backward(grad, dout, ids, N, C);
    double *td = tu_to_double(table, nt), *g = tu_to_double(dout, ny), *fd = malloc(nt * 8);
    tu_fd_grad(ref_embedding, &e, td, nt, g, ny, fd);
    expect_accumulated("embedding dtable", grad, base, fd, nt);
    free(table), free(out), free(dout), free(base), free(grad), free(td), free(g), free(fd);
}

/* ---- attention -------------------------------------------------------------------- */
typedef struct { int B, T, C, NH; } att_shape;
/* mask: dropout's keep-scale-or-0 factors on the [B,NH,T,T] probabilities, or NULL */
typedef struct { att_shape s; const float *mask; } attd_ctx;

static void ref_attention(const double *qkv, double *y, const void *ctx) {
    const attd_ctx *c = ctx;
    int B = c->s.B, T = c->s.T, C = c->s.C, NH = c->s.NH, hs = C / NH;
    double *p = malloc((size_t)T * sizeof *p);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                const float *m = c->mask ? c->mask + (((size_t)b * NH + h) * T + t) * T : NULL;
                double mx = -INFINITY, sum = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i];
                    p[u] = d / sqrt((double)hs);
                    if (p[u] > mx) mx = p[u];
                }
                for (int u = 0; u <= t; u++) sum += (p[u] = exp(p[u] - mx));
                double *o = y + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++)
                        acc += p[u] / sum * (m ? m[u] : 1.0) *
                               qkv[((size_t)b * T + u) * 3 * C + 2 * C + h * hs + i];
                    o[i] = acc;
                }
            }
    free(p);
}

static void check_attention(int B, int T, int C, int NH, int full_fd) {
    attd_ctx s = {{B, T, C, NH}, NULL};
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = tu_randf(nx, -1.5f, 1.5f), *out = tu_randf(ny, 0, 1), *dout = tu_randf(ny, -1, 1);
    float *att = tu_randf(na, 5, 6), *scratch = tu_randf(na, 5, 6);
    ds_attention_forward(out, att, qkv, B, T, C, NH);
    double *xd = tu_to_double(qkv, nx), *yd = malloc(ny * sizeof *yd);
    ref_attention(xd, yd, &s);
    assert_int_equal(tu_mismatch("attention out", out, yd, ny, FWD_ATOL, FWD_RTOL), 0);
    for (int r = 0; r < B * NH * T; r++) { /* rows are distributions, causal */
        int t = r % T;
        double sum = 0;
        for (int u = 0; u < T; u++) {
            float a = att[(size_t)r * T + u];
            if (u > t) assert_true(a == 0.0f);
            else assert_true(a >= 0.0f);
            sum += a;
        }
        expect_close("attention row sum", sum, 1.0, 1e-5);
    }
    float *base = tu_randf(nx, -0.5f, 0.5f), *grad = tu_copyf(base, nx);
    ds_attention_backward(grad, 1, scratch, dout, qkv, att, B, T, C, NH);
    double *g = tu_to_double(dout, ny);
    if (full_fd) {
        double *fd = malloc(nx * sizeof *fd);
        tu_fd_grad(ref_attention, &s, xd, nx, g, ny, fd);
        expect_accumulated("attention dqkv", grad, base, fd, nx);
        free(fd);
    } else {
        for (int k = 0; k < 2; k++) {
            float *df = tu_randf(nx, -1, 1);
            double *d = tu_to_double(df, nx);
            expect_close("attention directional", dot_fd(grad, base, d, nx),
                         tu_fd_dir(ref_attention, &s, xd, d, nx, g, ny), 1e-4);
            free(df), free(d);
        }
    }
    free(qkv), free(out), free(dout), free(att), free(scratch), free(xd), free(yd), free(base),
        free(grad), free(g);
}

static void test_attention_small(void **state) {
    (void)state;
    tu_seed(8);
    check_attention(2, 5, 8, 2, 1);
    check_attention(1, 7, 12, 3, 1);
    check_attention(1, 1, 4, 1, 1);
}

static void test_attention_large(void **state) {
    (void)state;
    tu_seed(9);
    check_attention(2, 64, 128, 2, 0);
    check_attention(1, 37, 96, 3, 0); /* odd T and head size not a multiple of 16 */
}

/* ---- attention with dropout on the probabilities ------------------------------------ */
/* grad - base against the finite differences of ref_attention under c's mask: each
 * element (full_fd) or two random directions */
static void expect_attention_grad(const char *what, const float *grad, const float *base,
                                  const attd_ctx *c, const double *xd, const double *g,
                                  int full_fd) {
    size_t nx = (size_t)c->s.B * c->s.T * 3 * c->s.C, ny = (size_t)c->s.B * c->s.T * c->s.C;
    if (full_fd) {
        double *fd = malloc(nx * sizeof *fd);
        tu_fd_grad(ref_attention, c, xd, nx, g, ny, fd);
        expect_accumulated(what, grad, base, fd, nx);
        free(fd);
        return;
    }
    for (int k = 0; k < 2; k++) {
        float *df = tu_randf(nx, -1, 1);
        double *d = tu_to_double(df, nx);
        expect_close(what, dot_fd(grad, base, d, nx), tu_fd_dir(ref_attention, c, xd, d, nx, g, ny),
                     1e-4);
        free(df), free(d);
    }
}

/* The reference pair and the fused one (kernels.h), which must draw the same mask: the
 * fused forward gives the reference's bits, both gradients match the finite differences
 * of the double-precision attention under ds_dropout_forward's mask. */
static void check_attention_dropout(int B, int T, int C, int NH, float p, int full_fd) {
    ds_rng_key key = {.seed = 0x5EEDull << 33 | 9, .step = 3, .layer = 17, .micro = 2};
    /* the mask the kernel must use: ds_dropout_forward's over the [B,NH,T,T] tensor */
    attd_ctx c = {{B, T, C, NH}, tu_dropout_of_ones((size_t)B * NH * T * T, p, key)};
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = tu_randf(nx, -1.5f, 1.5f), *out = tu_randf(ny, 0, 1), *dout = tu_randf(ny, -1, 1);
    float *att = tu_randf(na, 5, 6), *scratch = tu_randf(na, 5, 6);
    float *out0 = tu_randf(ny, 0, 1), *att0 = tu_randf(na, 5, 6);
    ds_attention_forward_dropout(out, att, qkv, B, T, C, NH, p, key);
    ds_attention_forward(out0, att0, qkv, B, T, C, NH);
    assert_memory_equal(att, att0, na * sizeof *att); /* att keeps P undropped */
    double *xd = tu_to_double(qkv, nx), *yd = malloc(ny * sizeof *yd);
    ref_attention(xd, yd, &c);
    assert_int_equal(tu_mismatch("attention dropout out", out, yd, ny, FWD_ATOL, FWD_RTOL), 0);
    float *base = tu_randf(nx, -0.5f, 0.5f), *grad = tu_copyf(base, nx);
    ds_attention_backward_dropout(grad, 1, scratch, dout, qkv, att, B, T, C, NH, p, key);
    double *g = tu_to_double(dout, ny);
    expect_attention_grad("attention dropout dqkv", grad, base, &c, xd, g, full_fd);
    float *outf = tu_randf(ny, 0, 1), *lse = tu_randf((size_t)B * NH * T, 0, 1);
    float *gradf = tu_copyf(base, nx);
    ds_attention_forward_fused(outf, lse, qkv, B, T, C, NH, p, key);
    assert_memory_equal(outf, out, ny * sizeof *out);
    ds_attention_backward_fused(gradf, 1, dout, qkv, lse, B, T, C, NH, p, key);
    expect_attention_grad("fused attention dropout dqkv", gradf, base, &c, xd, g, full_fd);
    free(qkv), free(out), free(dout), free(att), free(scratch), free(out0), free(att0), free(xd),
        free(yd), free(base), free(grad), free(g), free((float *)c.mask), free(outf), free(lse),
        free(gradf);
}

static void test_attention_dropout_grad(void **state) {
    (void)state;
    tu_seed(21);
    check_attention_dropout(2, 5, 8, 2, 0.3f, 1);
    check_attention_dropout(1, 7, 12, 3, 0.5f, 1);
    check_attention_dropout(2, 33, 64, 2, 0.1f, 0);
}

/* p = 0 must be the plain kernels, bit for bit, forward and backward. */
static void test_attention_dropout_p0(void **state) {
    (void)state;
    tu_seed(22);
    int B = 2, T = 19, C = 48, NH = 3;
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    ds_rng_key key = {42, 1, 2, 3, 0};
    float *qkv = tu_randf(nx, -1.5f, 1.5f), *dout = tu_randf(ny, -1, 1);
    float *o[2], *a[2], *sc[2], *g[2];
    float *base = tu_randf(nx, -0.5f, 0.5f);
    for (int k = 0; k < 2; k++) {
        o[k] = tu_randf(ny, 0, 1), a[k] = tu_randf(na, 0, 1), sc[k] = tu_randf(na, 0, 1);
        g[k] = tu_copyf(base, nx);
    }
    ds_attention_forward(o[0], a[0], qkv, B, T, C, NH);
    ds_attention_backward(g[0], 1, sc[0], dout, qkv, a[0], B, T, C, NH);
    ds_attention_forward_dropout(o[1], a[1], qkv, B, T, C, NH, 0.0f, key);
    ds_attention_backward_dropout(g[1], 1, sc[1], dout, qkv, a[1], B, T, C, NH, 0.0f, key);
    assert_memory_equal(o[0], o[1], ny * sizeof(float));
    assert_memory_equal(a[0], a[1], na * sizeof(float));
    assert_memory_equal(g[0], g[1], nx * sizeof(float));
    for (int k = 0; k < 2; k++) free(o[k]), free(a[k]), free(sc[k]), free(g[k]);
    free(qkv), free(dout), free(base);
}

/* With v[u] = e_u (head size T) the output row t is P[t] times its mask row: the
 * fraction of zeros among the causal entries is the drop rate, kept ones are scaled. */
static void test_attention_dropout_rate(void **state) {
    (void)state;
    tu_seed(23);
    int B = 8, T = 64, C = 64, NH = 1;
    float p = 0.1f, keep = 1.0f / (1.0f - p);
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = tu_randf(nx, -1, 1), *out = malloc(ny * sizeof *out), *att = malloc(na * sizeof *att);
    for (int b = 0; b < B; b++)
        for (int u = 0; u < T; u++)
            for (int i = 0; i < C; i++)
                qkv[((size_t)b * T + u) * 3 * C + 2 * C + i] = i == u ? 1.0f : 0.0f;
    ds_rng_key key = {777, 5, 4, 0, 0};
    ds_attention_forward_dropout(out, att, qkv, B, T, C, NH, p, key);
    size_t dropped = 0, total = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int u = 0; u <= t; u++) {
                float y = out[((size_t)b * T + t) * C + u], a = att[(((size_t)b * T) + t) * T + u];
                total++;
                if (y == 0.0f) dropped++;
                else assert_true(y == a * keep);
            }
    double rate = (double)dropped / total, sigma = sqrt(p * (1 - p) / total);
    assert_true(fabs(rate - p) < 6 * sigma);
    free(qkv), free(out), free(att);
}

/* key.offset = rows before mine * elements per row: the last batch row alone draws what
 * it draws as part of the whole batch (a data-parallel rank's slice), in the reference
 * kernels and the fused ones. */
static void test_attention_dropout_offset(void **state) {
    (void)state;
    tu_seed(24);
    int B = 3, T = 11, C = 24, NH = 2;
    size_t nx = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    size_t rx = nx / B, ry = ny / B, ra = na / B;
    float *qkv = tu_randf(nx, -1.5f, 1.5f), *dout = tu_randf(ny, -1, 1);
    float *out = malloc(ny * sizeof *out), *att = malloc(na * sizeof *att), *sc = malloc(na * sizeof *sc);
    float *grad = calloc(nx, sizeof *grad), *g1 = calloc(rx, sizeof *g1);
    float *o1 = malloc(ry * sizeof *o1), *a1 = malloc(ra * sizeof *a1), *s1 = malloc(ra * sizeof *s1);
    ds_rng_key key = {99, 2, 6, 1, 0};
    ds_attention_forward_dropout(out, att, qkv, B, T, C, NH, 0.4f, key);
    ds_attention_backward_dropout(grad, 1, sc, dout, qkv, att, B, T, C, NH, 0.4f, key);
    key.offset = 2 * ra;
    ds_attention_forward_dropout(o1, a1, qkv + 2 * rx, 1, T, C, NH, 0.4f, key);
    ds_attention_backward_dropout(g1, 1, s1, dout + 2 * ry, qkv + 2 * rx, a1, 1, T, C, NH, 0.4f,
                                  key);
    assert_memory_equal(o1, out + 2 * ry, ry * sizeof *o1);
    assert_memory_equal(g1, grad + 2 * rx, rx * sizeof *g1);
    float *lse = malloc((size_t)B * NH * T * sizeof *lse), *l1 = malloc((size_t)NH * T * sizeof *l1);
    memset(grad, 0, nx * sizeof *grad), memset(g1, 0, rx * sizeof *g1);
    key.offset = 0;
    ds_attention_forward_fused(out, lse, qkv, B, T, C, NH, 0.4f, key);
    ds_attention_backward_fused(grad, 1, dout, qkv, lse, B, T, C, NH, 0.4f, key);
    key.offset = 2 * ra;
    ds_attention_forward_fused(o1, l1, qkv + 2 * rx, 1, T, C, NH, 0.4f, key);
    ds_attention_backward_fused(g1, 1, dout + 2 * ry, qkv + 2 * rx, l1, 1, T, C, NH, 0.4f, key);
    assert_memory_equal(o1, out + 2 * ry, ry * sizeof *o1);
    assert_memory_equal(g1, grad + 2 * rx, rx * sizeof *g1);
    free(qkv), free(dout), free(out), free(att), free(sc), free(grad), free(g1), free(o1),
        free(a1), free(s1), free(lse), free(l1);
}

/* ---- cross-entropy ---------------------------------------------------------------- */
typedef struct { int N, V; const int32_t *targets; } ce_ctx;

static void ref_crossentropy(const double *x, double *y, const void *ctx) {
    const ce_ctx *e = ctx;
    for (int n = 0; n < e->N; n++) {
        const double *r = x + (size_t)n * e->V;
        if (e->targets[n] < 0) {
            y[n] = 0;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < e->V; v++) mx = r[v] > mx ? r[v] : mx;
        for (int v = 0; v < e->V; v++) sum += exp(r[v] - mx);
        y[n] = mx + log(sum) - r[e->targets[n]];
    }
}

static void check_crossentropy(int N, int V, const int32_t *targets, float spread, int full_fd) {
    ce_ctx e = {N, V, targets};
    size_t nx = (size_t)N * V;
    float *logits = tu_randf(nx, -spread, spread), *losses = tu_randf(N, 5, 6);
    double total = ds_crossentropy_forward(losses, logits, targets, N, V);
    double *xd = tu_to_double(logits, nx), *yd = malloc(N * sizeof *yd), want_total = 0;
    ref_crossentropy(xd, yd, &e);
    for (int n = 0; n < N; n++) want_total += yd[n];
    assert_int_equal(tu_mismatch("crossentropy losses", losses, yd, N, FWD_ATOL, FWD_RTOL), 0);
    expect_close("crossentropy total", total, want_total, 1e-5);
    float dloss = 0.7f;
    /* backward writes (=): what the buffer held before must not show through */
    float *base = calloc(nx, sizeof *base), *grad = tu_randf(nx, -0.5f, 0.5f);
    ds_crossentropy_backward(grad, logits, targets, dloss, N, V);
    double *g = malloc(N * sizeof *g);
    for (int n = 0; n < N; n++) g[n] = dloss;
    if (full_fd) {
        double *fd = malloc(nx * sizeof *fd);
        tu_fd_grad(ref_crossentropy, &e, xd, nx, g, N, fd);
        expect_accumulated("crossentropy dlogits", grad, base, fd, nx);
        free(fd);
    } else {
        float *df = tu_randf(nx, -1, 1);
        double *d = tu_to_double(df, nx);
        expect_close("crossentropy directional", dot_fd(grad, base, d, nx),
                     tu_fd_dir(ref_crossentropy, &e, xd, d, nx, g, N), 1e-4);
        free(df), free(d);
    }
    free(logits), free(losses), free(xd), free(yd), free(base), free(grad), free(g);
}

static void test_crossentropy_small(void **state) {
    (void)state;
    tu_seed(10);
    int32_t t1[4] = {3, -1, 0, 10};
    check_crossentropy(4, 11, t1, 3.0f, 1);
    int32_t t2[3] = {0, 1, 2};
    check_crossentropy(3, 3, t2, 40.0f, 1); /* large logits: needs the max shift */
}

static void test_crossentropy_gpt2_vocab(void **state) {
    (void)state;
    tu_seed(11);
    int32_t t[3] = {50256, 17, -1};
    check_crossentropy(3, 50257, t, 8.0f, 0);
}

/* The fused forward+backward gives forward's losses and backward's gradient bit for bit,
 * and backward gives the same bits in place over the logits as into another buffer
 * (whatever that held): the criterion's in-place backward changes no result. Ignored rows
 * get a zero gradient. */
static void test_crossentropy_fused(void **state) {
    (void)state;
    tu_seed(13);
    int N = 5, V = 1031;
    int32_t t[5] = {7, -1, 1030, 0, 512};
    size_t nx = (size_t)N * V;
    float *logits = tu_randf(nx, -6, 6), *l1 = malloc(N * 4), *l2 = malloc(N * 4);
    float *l3 = malloc(N * 4), *d1 = tu_randf(nx, 3, 4), *d2 = tu_randf(nx, 3, 4);
    float *inplace = tu_copyf(logits, nx), *inplace_bwd = tu_copyf(logits, nx);
    double s1 = ds_crossentropy_forward(l1, logits, t, N, V);
    ds_crossentropy_backward(d1, logits, t, 0.25f, N, V);
    ds_crossentropy_backward(inplace_bwd, inplace_bwd, t, 0.25f, N, V);
    double s2 = ds_crossentropy_forward_backward(l2, d2, logits, t, 0.25f, N, V);
    double s3 = ds_crossentropy_forward_backward(l3, inplace, inplace, t, 0.25f, N, V);
    assert_memory_equal(&s1, &s2, sizeof s1);
    assert_memory_equal(&s2, &s3, sizeof s2);
    assert_memory_equal(l1, l2, N * 4);
    assert_memory_equal(l2, l3, N * 4);
    assert_memory_equal(d1, inplace_bwd, nx * 4);
    assert_memory_equal(d1, d2, nx * 4);
    assert_memory_equal(d2, inplace, nx * 4);
    for (int v = 0; v < V; v++) assert_true(d1[V + v] == 0.0f && !signbit(d1[V + v]));
    free(logits), free(l1), free(l2), free(l3), free(d1), free(d2), free(inplace),
        free(inplace_bwd);
}

/* ---- determinism ------------------------------------------------------------------ */
/* Same call twice => same bits; for the non-GEMM kernels also the same bits with 1 and 2
 * threads, since they split work so that no sum depends on the thread count. (GEMMs are
 * not: OpenBLAS picks its kernels and blocking by the block size each thread gets.) */
static void run_non_gemm(float *res, const float *x, int threads) {
    /* large enough that every kernel takes its parallel path (see DS_PAR_MIN) */
    enum { B = 2, T = 64, C = 2304, NH = 36, V = 4099, N = B * T };
    ds_kernels_set_threads(threads);
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (i * 7) % 13;
    float mean[N], rstd[N];
    size_t off = 0;
    ds_layernorm_forward(res + off, mean, rstd, x, x + N * C, x + N * C + C, N, C, 1e-5f);
    off += N * C;
    memset(res + off, 0, ((size_t)N * C + 2 * C) * sizeof(float));
    ds_layernorm_backward(res + off, 1, res + off + N * C, res + off + N * C + C, x + 5, x, x + 1,
                          mean, rstd, N, C);
    off += N * C + 2 * C;
    ds_attention_forward(res + off, res + off + (size_t)N * C, x, B, T, C, NH);
    const float *att = res + off + (size_t)N * C;
    off += (size_t)N * C + (size_t)B * NH * T * T;
    memset(res + off, 0, (size_t)N * 3 * C * sizeof(float));
    ds_attention_backward(res + off, 1, res + off + (size_t)N * 3 * C, x + 3, x, att, B, T, C, NH);
    off += (size_t)N * 3 * C + (size_t)B * NH * T * T;
    int32_t tg[N];
    for (int i = 0; i < N; i++) tg[i] = (i * 31) % V;
    double tot = ds_crossentropy_forward(res + off, x, tg, N, V);
    memcpy(res + off + N, &tot, sizeof tot);
    off += N + 2;
    memset(res + off, 0, (size_t)N * V * sizeof(float));
    ds_crossentropy_backward(res + off, x, tg, 0.01f, N, V);
    off += (size_t)N * V;
    memset(res + off, 0, 13 * (size_t)C * sizeof(float));
    ds_embedding_backward(res + off, x, ids, N, C);
    off += 13 * (size_t)C;
    double ss = ds_sumsq(x, 300000);
    memcpy(res + off, &ss, sizeof ss);
}

static void test_determinism(void **state) {
    (void)state;
    tu_seed(12);
    size_t nres = 4000000;
    float *x = tu_randf(1000000, -1, 1);
    float *r1 = calloc(nres, 4), *r2 = calloc(nres, 4), *r3 = calloc(nres, 4);
    run_non_gemm(r1, x, 2);
    run_non_gemm(r2, x, 2);
    run_non_gemm(r3, x, 1);
    ds_kernels_set_threads(0);
    assert_memory_equal(r1, r2, nres * 4);
    assert_memory_equal(r1, r3, nres * 4);

    int N = 64, C = 200, OC = 300;
    float *w = tu_randf(OC * C, -1, 1), *o1 = calloc(N * OC, 4), *o2 = calloc(N * OC, 4);
    float *g1 = calloc(OC * C + N * C + OC, 4), *g2 = calloc(OC * C + N * C + OC, 4);
    for (int k = 0; k < 2; k++) {
        float *o = k ? o2 : o1, *g = k ? g2 : g1;
        ds_matmul_forward(o, x, w, x + 7, N, C, OC);
        ds_matmul_backward(g, 1, g + N * C, g + N * C + OC * C, x + 11, x, w, N, C, OC);
    }
    assert_memory_equal(o1, o2, N * OC * 4);
    assert_memory_equal(g1, g2, (OC * C + N * C + OC) * 4);
    free(x), free(r1), free(r2), free(r3), free(w), free(o1), free(o2), free(g1), free(g2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_small),     cmocka_unit_test(test_matmul_large),
        cmocka_unit_test(test_matmul_no_bias),   cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_add_accumulate_scale), cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_embedding),        cmocka_unit_test(test_attention_small),
        cmocka_unit_test(test_attention_large),  cmocka_unit_test(test_attention_dropout_grad),
        cmocka_unit_test(test_attention_dropout_p0), cmocka_unit_test(test_attention_dropout_rate),
        cmocka_unit_test(test_attention_dropout_offset), cmocka_unit_test(test_crossentropy_small),
        cmocka_unit_test(test_crossentropy_gpt2_vocab), cmocka_unit_test(test_crossentropy_fused),
        cmocka_unit_test(test_determinism),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
