/* A whole tiny GPT, built by lua/ds/gpt.lua and run by the engine in fp32, against a
 * double-precision reference forward written here from GPT-2's definition: the loss must
 * match, and every parameter's gradient must match the central finite difference of the
 * double loss. The reference is independent of the engine (its own attention, LayerNorm,
 * GELU, tied head), so this checks the layers, the containers, the flat buffers, the
 * tie and the criterion together. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_test_lua.h"

enum { V = 11, CTX = 5, NL = 2, NH = 2, D = 8, B = 2, T = 5 };

static const char *BUILD =
    "ds = require 'ds'; gpt = require 'ds.gpt'\n"
    "m = gpt.GPT({vocab=11, context=5, layers=2, heads=2, d=8, dropout=0}, {seed=7})\n"
    "x = ds.tensor('int32', 2, 5); y = ds.tensor('int32', 2, 5)\n"
    "x:from_table{1,4,9,2,0, 10,3,3,7,5}; y:from_table{4,9,2,0,6, 3,3,7,5,8}\n"
    /* Move every parameter off its special init (unit LN weights, zero biases) so each
     * term of the gradient is exercised; values stay O(1). */
    "math.randomseed(42)\n"
    "for _, p in ipairs(m:parameters()) do\n"
    "  local t = m:param(p.name)\n"
    "  for i = 1, t:numel() do t:set(i, t:get(i) + 0.6 * (math.random() - 0.5)) end\n"
    "end\n"
    "m:zero_grad(); loss = m:forward(x, y, {train=false}); m:backward(1.0)\n"
    "names = {}; for i, p in ipairs(m:parameters()) do names[i] = p.name end\n";

/* ---- the double reference ------------------------------------------------------------ */

typedef struct ref_param {
    char name[96];
    size_t n;
    double *w;
    const float *grad; /* the engine's gradient */
} ref_param;

static ref_param g_params[64];
static int g_nparams;
static const int g_x[B * T] = {1, 4, 9, 2, 0, 10, 3, 3, 7, 5};
static const int g_y[B * T] = {4, 9, 2, 0, 6, 3, 3, 7, 5, 8};

static double *P(const char *fmt, ...) {
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < g_nparams; i++)
        if (!strcmp(g_params[i].name, name)) return g_params[i].w;
    fail_msg("reference: no parameter %s", name);
    return NULL;
}

static void layernorm(double *out, const double *x, const double *w, const double *b) {
    for (int r = 0; r < B * T; r++) {
        const double *xr = x + r * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++) mean += xr[i];
        mean /= D;
        for (int i = 0; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        double rstd = 1.0 / sqrt(var + 1e-5);
        for (int i = 0; i < D; i++) out[r * D + i] = (xr[i] - mean) * rstd * w[i] + b[i];
    }
}

/* out[r, o] = sum_i x[r, i] * W[o, i] + b[o] */
static void linear(double *out, const double *x, const double *W, const double *b, int in, int n_out) {
    for (int r = 0; r < B * T; r++)
        for (int o = 0; o < n_out; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < in; i++) s += x[r * in + i] * W[o * in + i];
            out[r * n_out + o] = s;
        }
}

static void attention(double *out, const double *qkv) {
    int hs = D / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * D + h * hs;
                double s[T], mx = -1e300, z = 0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + (b * T + u) * 3 * D + D + h * hs;
                    double dot = 0;
                    for (int i = 0; i < hs; i++) dot += q[i] * k[i];
                    s[u] = dot / sqrt((double)hs);
                    if (s[u] > mx) mx = s[u];
                }
                for (int u = 0; u <= t; u++) z += (s[u] = exp(s[u] - mx));
                for (int i = 0; i < hs; i++) {
                    double acc = 0;
                    for (int u = 0; u <= t; u++) acc += s[u] / z * qkv[(b * T + u) * 3 * D + 2 * D + h * hs + i];
                    out[(b * T + t) * D + h * hs + i] = acc;
                }
            }
}

static double gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double ref_loss(void) {
    static double x[B * T * D], h[B * T * D], qkv[B * T * 3 * D], a[B * T * D], y[B * T * D],
        f[B * T * 4 * D], logits[B * T * V];
    const double *wte = P("wte.weight"), *wpe = P("wpe.weight");
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < D; i++)
                x[(b * T + t) * D + i] = wte[g_x[b * T + t] * D + i] + wpe[t * D + i];
    for (int l = 0; l < NL; l++) {
        layernorm(h, x, P("h.%d.ln_1.weight", l), P("h.%d.ln_1.bias", l));
        linear(qkv, h, P("h.%d.attn.c_attn.weight", l), P("h.%d.attn.c_attn.bias", l), D, 3 * D);
        attention(a, qkv);
        linear(y, a, P("h.%d.attn.c_proj.weight", l), P("h.%d.attn.c_proj.bias", l), D, D);
        for (int i = 0; i < B * T * D; i++) x[i] += y[i];
        layernorm(h, x, P("h.%d.ln_2.weight", l), P("h.%d.ln_2.bias", l));
        linear(f, h, P("h.%d.mlp.c_fc.weight", l), P("h.%d.mlp.c_fc.bias", l), D, 4 * D);
        for (int i = 0; i < B * T * 4 * D; i++) f[i] = gelu(f[i]);
        linear(y, f, P("h.%d.mlp.c_proj.weight", l), P("h.%d.mlp.c_proj.bias", l), 4 * D, D);
        for (int i = 0; i < B * T * D; i++) x[i] += y[i];
    }
    layernorm(h, x, P("ln_f.weight"), P("ln_f.bias"));
    linear(logits, h, wte, NULL, D, V); /* the tied head */
    double loss = 0;
    for (int r = 0; r < B * T; r++) {
        double mx = -1e300, z = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, logits[r * V + v]);
        for (int v = 0; v < V; v++) z += exp(logits[r * V + v] - mx);
        loss += log(z) + mx - logits[r * V + g_y[r]];
    }
    return loss / (B * T);
}

static void test_gpt_gradients_match_double_finite_differences(void **state) {
    (void)state;
    lua_State *L = eng_lua_new();
    assert_non_null(L);
    assert_int_equal(eng_lua_run(L, BUILD, 0), 0);
    g_nparams = (int)eng_lua_number(L, "#names");
    assert_true(g_nparams == 4 + NL * 12);
    for (int i = 0; i < g_nparams; i++) {
        char expr[128];
        snprintf(expr, sizeof expr, "return names[%d]", i + 1);
        assert_int_equal(eng_lua_run(L, expr, 1), 0);
        snprintf(g_params[i].name, sizeof g_params[i].name, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        snprintf(expr, sizeof expr, "m:param(names[%d])", i + 1);
        ds_tensor *w = eng_lua_tensor(L, expr);
        snprintf(expr, sizeof expr, "m:param(names[%d], true)", i + 1);
        ds_tensor *g = eng_lua_tensor(L, expr);
        assert_non_null(w);
        assert_non_null(g);
        g_params[i].n = (size_t)w->numel;
        g_params[i].w = malloc(g_params[i].n * sizeof(double));
        for (size_t j = 0; j < g_params[i].n; j++) g_params[i].w[j] = ((float *)w->data)[j];
        g_params[i].grad = g->data;
    }

    double loss32 = eng_lua_number(L, "loss");
    double loss64 = ref_loss();
    printf("loss: engine fp32 %.9f, reference double %.9f\n", loss32, loss64);
    assert_true(fabs(loss32 - loss64) < 1e-5 * fmax(1.0, fabs(loss64)));

    /* Central differences of the double loss: truncation O(h^2) ~ 1e-10 and rounding
     * ~1e-16/h ~ 1e-11, so fd is exact to ~1e-9 and what remains is the engine's fp32
     * rounding: activations O(1), accumulations of <= 4*D terms, relative error of fp32
     * sums ~ n * 6e-8, i.e. ~1e-5 on gradients of O(0.1-1). Hence atol 5e-5 + rtol 1e-3. */
    const double h = 1e-5;
    double worst = 0, max_fd = 0;
    const char *worst_name = "";
    size_t checked = 0;
    for (int i = 0; i < g_nparams; i++) {
        ref_param *p = &g_params[i];
        for (size_t j = 0; j < p->n; j++) {
            double keep = p->w[j];
            p->w[j] = keep + h;
            double lp = ref_loss();
            p->w[j] = keep - h;
            double lm = ref_loss();
            p->w[j] = keep;
            double fd = (lp - lm) / (2 * h);
            max_fd = fmax(max_fd, fabs(fd));
            double err = fabs(p->grad[j] - fd) / (5e-5 + 1e-3 * fabs(fd));
            if (err > worst) {
                worst = err;
                worst_name = p->name;
            }
            if (err > 1.0)
                fail_msg("%s[%zu]: engine %.8g, finite difference %.8g", p->name, j,
                         (double)p->grad[j], fd);
            checked++;
        }
    }
    printf("checked %zu gradients (largest %.3g); worst error %.3f of tolerance (%s)\n", checked,
           max_fd, worst, worst_name);
    assert_true(max_fd > 0.05); /* the gradients are not trivially zero */
    for (int i = 0; i < g_nparams; i++) free(g_params[i].w);
    eng_lua_close(L);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_gradients_match_double_finite_differences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
