/* Optimizer steps (the fused AdamW too), sum of squares, precision conversion and dropout
 * on the GPU against the CPU kernels. Conversion and the dropout mask come from the same integer code on both
 * sides (kernel_math.h): they must match bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static void test_adamw(gh *g, size_t n, float grad_scale) {
    char what[96];
    float *p0 = gh_randf(g, n, -1, 1), *m0 = gh_randf(g, n, -0.1f, 0.1f);
    float *v0 = gh_randf(g, n, 0, 0.01f), *grad = gh_randf(g, n, -1, 1);
    float *p = gh_copyf(p0, n), *m = gh_copyf(m0, n), *v = gh_copyf(v0, n);
    float *d_p = gh_up(g, p0, n * 4), *d_m = gh_up(g, m0, n * 4), *d_v = gh_up(g, v0, n * 4);
    float *d_g = gh_up(g, grad, n * 4);
    for (int t = 1; t <= 3; t++) {
        ds_adamw_update_scaled(p, grad, grad_scale, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        GH_OK(g, ds_cuda_adamw_update_scaled(g->ctx, d_p, d_g, grad_scale, d_m, d_v, n, 6e-4f,
                                             0.9f, 0.95f, 1e-8f, 0.1f, t));
    }
    float *gp = gh_downf(g, d_p, n), *gm = gh_downf(g, d_m, n), *gv = gh_downf(g, d_v, n);
    snprintf(what, sizeof what, "adamw x3 param (grad scale %g)", grad_scale);
    gh_close(g, what, gp, p, n, 1e-6f, 1e-6f);
    gh_close(g, "adamw x3 m", gm, m, n, 1e-7f, 1e-6f);
    gh_close(g, "adamw x3 v", gv, v, n, 1e-9f, 1e-6f);
    free(gp), free(gm), free(gv), free(p0), free(m0), free(v0), free(grad), free(p), free(m), free(v);
    ds_cuda_free(g->ctx, d_p), ds_cuda_free(g->ctx, d_m), ds_cuda_free(g->ctx, d_v);
    ds_cuda_free(g->ctx, d_g);
}

static void test_sgd(gh *g, size_t n, float momentum) {
    char what[96];
    float *p0 = gh_randf(g, n, -1, 1), *b0 = gh_randf(g, n, -1, 1), *grad = gh_randf(g, n, -1, 1);
    float *p = gh_copyf(p0, n), *b = gh_copyf(b0, n);
    float *d_p = gh_up(g, p0, n * 4), *d_b = gh_up(g, b0, n * 4), *d_g = gh_up(g, grad, n * 4);
    for (int t = 0; t < 3; t++) {
        ds_sgd_update(p, grad, momentum != 0.0f ? b : NULL, n, 0.01f, momentum, 1e-4f);
        GH_OK(g, ds_cuda_sgd_update(g->ctx, d_p, d_g, momentum != 0.0f ? d_b : NULL, n, 0.01f,
                                    momentum, 1e-4f));
    }
    float *gp = gh_downf(g, d_p, n), *gb = gh_downf(g, d_b, n);
    snprintf(what, sizeof what, "sgd x3 param (momentum %g)", momentum);
    gh_close(g, what, gp, p, n, 1e-7f, 1e-6f);
    gh_close(g, "sgd x3 momentum buffer", gb, b, n, 1e-7f, 1e-6f);
    free(gp), free(gb), free(p0), free(b0), free(grad), free(p), free(b);
    ds_cuda_free(g->ctx, d_p), ds_cuda_free(g->ctx, d_b), ds_cuda_free(g->ctx, d_g);
}

static void test_sumsq(gh *g, size_t n) {
    char what[96];
    float *x = gh_randf(g, n, -1, 1);
    float *d_x = gh_up(g, x, n * 4);
    double want = ds_sumsq(x, n), got1 = -1, got2 = -2;
    GH_OK(g, ds_cuda_sumsq_host(g->ctx, d_x, n, &got1));
    GH_OK(g, ds_cuda_sumsq_host(g->ctx, d_x, n, &got2));
    snprintf(what, sizeof what, "sumsq n=%zu: gpu %.17g cpu %.17g", n, got1, want);
    gh_expect(g, what, fabs(got1 - want) <= 1e-12 * (want + 1.0));
    gh_same_bits(g, "sumsq twice", &got1, &got2, sizeof got1);
    /* the device-result form agrees with the host form */
    double *d_res = gh_zeros(g, sizeof(double)), got3 = -3;
    GH_OK(g, ds_cuda_sumsq(g->ctx, d_x, n, d_res));
    gh_down(g, &got3, d_res, sizeof got3);
    gh_same_bits(g, "sumsq device result = host result", &got1, &got3, sizeof got1);
    free(x);
    ds_cuda_free(g->ctx, d_x), ds_cuda_free(g->ctx, d_res);
}

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* 16-bit results: the same bits, except that a NaN only needs to be a NaN (the CPU's F16C
 * path and the scalar code may keep different payload bits) */
static void same_halves(gh *g, const char *what, const uint16_t *gpu, const uint16_t *cpu,
                        size_t n, int f16) {
    size_t bad = 0, nan_payload = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t exp = f16 ? 0x7C00u : 0x7F80u, man = f16 ? 0x03FFu : 0x007Fu;
        int gnan = (gpu[i] & exp) == exp && (gpu[i] & man);
        int cnan = (cpu[i] & exp) == exp && (cpu[i] & man);
        if (gnan && cnan) nan_payload += gpu[i] != cpu[i];
        else if (gpu[i] != cpu[i]) bad++;
    }
    char line[160];
    snprintf(line, sizeof line, "%s: %zu of %zu differ (%zu NaNs with other payload bits)", what,
             bad, n, nan_payload);
    gh_expect(g, line, bad == 0);
}

static void test_convert(gh *g) {
    /* random bit patterns (every class: NaN, inf, denormals) plus the rounding edges */
    size_t n = 1 << 20;
    float *x = gh_alloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = bits_f(gh_rand_u32(g));
    static const uint32_t edges[] = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,
                                     0x7FC00000u, 0x7F800001u, 0x477FF000u, 0x477FEFFFu,
                                     0x38800000u, 0x387FFFFFu, 0x33000000u, 0x33000001u,
                                     0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0x00000001u};
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) x[i] = bits_f(edges[i]);
    for (size_t i = 16; i < 4096; i++) x[i] = (float)(i - 2048) * 0.37f; /* ordinary values */
    uint16_t *h = gh_alloc(n * 2), *gotw = gh_alloc(n * 2);
    float *d_x = gh_up(g, x, n * 4);
    uint16_t *d_h = gh_zeros(g, n * 2);

    ds_f32_to_bf16(h, x, n);
    GH_OK(g, ds_cuda_f32_to_bf16(g->ctx, d_h, d_x, n));
    gh_down(g, gotw, d_h, n * 2);
    same_halves(g, "f32 -> bf16", gotw, h, n, 0);
    ds_f32_to_f16(h, x, n);
    GH_OK(g, ds_cuda_f32_to_f16(g->ctx, d_h, d_x, n));
    gh_down(g, gotw, d_h, n * 2);
    same_halves(g, "f32 -> f16", gotw, h, n, 1);

    /* back: every 16-bit pattern. The CPU's F16C path quiets signalling NaNs, the shared
     * scalar code keeps them: NaN must map to NaN, everything else bit for bit. */
    size_t m = 65536;
    uint16_t *all = gh_alloc(m * 2);
    for (size_t i = 0; i < m; i++) all[i] = (uint16_t)i;
    uint16_t *d_all = gh_up(g, all, m * 2);
    float *want = gh_alloc(m * 4), *got = gh_alloc(m * 4);
    for (int f16 = 0; f16 < 2; f16++) {
        if (f16) {
            ds_f16_to_f32(want, all, m);
            GH_OK(g, ds_cuda_f16_to_f32(g->ctx, (float *)d_x, d_all, m));
        } else {
            ds_bf16_to_f32(want, all, m);
            GH_OK(g, ds_cuda_bf16_to_f32(g->ctx, (float *)d_x, d_all, m));
        }
        gh_down(g, got, d_x, m * 4);
        size_t bad = 0;
        for (size_t i = 0; i < m; i++) {
            int both_nan = isnan(got[i]) && isnan(want[i]);
            if (!both_nan && memcmp(&got[i], &want[i], 4) != 0) bad++;
        }
        gh_expect(g, f16 ? "f16 -> f32, all 65536 patterns" : "bf16 -> f32, all 65536 patterns",
                  bad == 0);
    }
    free(x), free(h), free(gotw), free(all), free(want), free(got);
    ds_cuda_free(g->ctx, d_x), ds_cuda_free(g->ctx, d_h), ds_cuda_free(g->ctx, d_all);
}

static void test_dropout(gh *g, size_t n, float p, ds_rng_key key) {
    char what[128];
    float *x = gh_randf(g, n, -1, 1), *acc0 = gh_randf(g, n, -1, 1);
    float *want = gh_alloc(n * 4), *wantb = gh_copyf(acc0, n);
    ds_dropout_forward(want, x, n, p, key);
    ds_dropout_backward(wantb, 1, x, n, p, key);
    float *d_x = gh_up(g, x, n * 4), *d_o = gh_zeros(g, n * 4), *d_b = gh_up(g, acc0, n * 4);
    GH_OK(g, ds_cuda_dropout_forward(g->ctx, d_o, d_x, n, p, key));
    GH_OK(g, ds_cuda_dropout_backward(g->ctx, d_b, 1, d_x, n, p, key));
    float *got = gh_downf(g, d_o, n), *gotb = gh_downf(g, d_b, n);
    snprintf(what, sizeof what, "dropout fwd = CPU bits n=%zu p=%g seed=%llx", n, p,
             (unsigned long long)key.seed);
    gh_same_bits(g, what, got, want, n * 4);
    snprintf(what, sizeof what, "dropout bwd (accumulating) = CPU bits n=%zu p=%g", n, p);
    gh_same_bits(g, what, gotb, wantb, n * 4);
    if (p > 0.0f && p < 1.0f) {
        size_t dropped = 0;
        for (size_t i = 0; i < n; i++) dropped += got[i] == 0.0f;
        double frac = (double)dropped / (double)n;
        snprintf(what, sizeof what, "dropout drops %.4f of elements (p=%g)", frac, p);
        gh_expect(g, what, n < 10000 || fabs(frac - p) < 0.01);
    }
    free(x), free(acc0), free(want), free(wantb), free(got), free(gotb);
    ds_cuda_free(g->ctx, d_x), ds_cuda_free(g->ctx, d_o), ds_cuda_free(g->ctx, d_b);
}

static void test_philox_vector(gh *g) {
    /* Random123's known-answer vector for Philox4x32-10, counter = key = 0: checks the
     * CPU reference the GPU kernel is compared with */
    uint32_t ctr[4] = {0, 0, 0, 0}, key[2] = {0, 0}, out[4];
    ds_philox4x32(out, ctr, key);
    gh_expect(g, "philox4x32-10 known answer (zero counter and key)",
              out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu &&
                  out[3] == 0x9b00dbd8u);
}

/* The fused AdamW against the CPU's steps with the scale computed here as train_step
 * does (double: norm = sqrt(sumsq) / loss scale, clip when above max_norm, / loss scale);
 * the squared norm is read on the device. half: DS_HALF_BF16 / _F16, or -1 for fp32. A
 * non-finite squared norm (an fp16 overflow) leaves everything as it was. */
static void test_adamw_fused(gh *g, int half, size_t n, double sumsq, double loss_scale,
                             double max_norm) {
    char what[128];
    ds_half h = half < 0 ? DS_HALF_BF16 : (ds_half)half;
    size_t wb = half < 0 ? 4 : 2;
    float *master0 = gh_randf(g, n, -1, 1), *m0 = gh_randf(g, n, -0.1f, 0.1f);
    float *v0 = gh_randf(g, n, 0, 0.01f), *gradf = gh_randf(g, n, -100, 100);
    uint16_t *w16 = gh_alloc(n * 2), *g16 = gh_alloc(n * 2);
    ds_half_from_f32(h, w16, master0, n);
    ds_half_from_f32(h, g16, gradf, n);
    const void *w0 = half < 0 ? (const void *)master0 : (const void *)w16;
    const void *grad = half < 0 ? (const void *)gradf : (const void *)g16;
    float *master = gh_copyf(master0, n), *m = gh_copyf(m0, n), *v = gh_copyf(v0, n);
    void *w = gh_alloc(n * wb);
    memcpy(w, w0, n * wb);

    double norm = sqrt(sumsq) / loss_scale;
    double clip = max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
    float gs = (float)(clip / loss_scale);
    int skipped = !isfinite(sumsq);
    for (int t = 1; t <= 2 && !skipped; t++) {
        if (half < 0) ds_adamw_update_scaled(w, grad, gs, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        else ds_adamw_update_half(h, w, grad, gs, master, m, v, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }

    void *d_w = gh_up(g, w0, n * wb), *d_g = gh_up(g, grad, n * wb);
    float *d_master = gh_up(g, master0, n * 4), *d_m = gh_up(g, m0, n * 4), *d_v = gh_up(g, v0, n * 4);
    double *d_ss = gh_up(g, &sumsq, sizeof sumsq);
    for (int t = 1; t <= 2; t++)
        GH_OK(g, ds_cuda_adamw_fused(g->ctx, half, d_w, d_g, d_ss, loss_scale, max_norm,
                                     half < 0 ? NULL : d_master, d_m, d_v, n, 6e-4f, 0.9f, 0.95f,
                                     1e-8f, 0.1f, t));
    const char *name = half < 0 ? "fp32" : h == DS_HALF_BF16 ? "bf16" : "fp16";
    snprintf(what, sizeof what, "adamw fused %s x2 (sumsq %g, loss scale %g, max norm %g): m",
             name, sumsq, loss_scale, max_norm);
    float *gm = gh_downf(g, d_m, n), *gv = gh_downf(g, d_v, n);
    gh_close(g, what, gm, m, n, 1e-7f, 1e-6f);
    gh_close(g, "  v", gv, v, n, 1e-9f, 1e-6f);
    void *gw = gh_alloc(n * wb);
    gh_down(g, gw, d_w, n * wb);
    if (half < 0) {
        gh_close(g, "  the parameter", gw, w, n, 1e-6f, 1e-6f);
    } else {
        float *gmaster = gh_downf(g, d_master, n), *a = gh_alloc(n * 4), *b = gh_alloc(n * 4);
        gh_close(g, "  fp32 masters", gmaster, master, n, 1e-6f, 1e-6f);
        ds_half_to_f32(h, a, gw, n);
        ds_half_to_f32(h, b, w, n);
        /* a master within 1e-6 may round the other way: one unit in the last place */
        gh_close(g, "  the 16-bit copy, written in the same pass", a, b, n, 1e-6f,
                 h == DS_HALF_BF16 ? 1.0f / 128 : 1.0f / 1024);
        free(gmaster), free(a), free(b);
    }
    if (skipped) gh_same_bits(g, "  skipped: the weights untouched", gw, w0, n * wb);
    free(gm), free(gv), free(gw), free(master0), free(m0), free(v0), free(gradf), free(w16);
    free(g16), free(master), free(m), free(v), free(w);
    ds_cuda_free(g->ctx, d_w), ds_cuda_free(g->ctx, d_g), ds_cuda_free(g->ctx, d_master);
    ds_cuda_free(g->ctx, d_m), ds_cuda_free(g->ctx, d_v), ds_cuda_free(g->ctx, d_ss);
}

int main(void) {
    gh g;
    gh_init(&g, "test_gpu_optim");
    test_adamw(&g, 1000003, 1.0f);
    test_adamw(&g, 4099, 0.25f);
    test_adamw_fused(&g, DS_HALF_BF16, 100003, 4.0e10, 1.0, 1.0);     /* clipped */
    test_adamw_fused(&g, DS_HALF_F16, 100003, 1.0e6, 65536.0, 0.0);   /* unscaled only */
    test_adamw_fused(&g, -1, 100003, 2.5e3, 1.0, 100.0);              /* fp32, below the clip */
    test_adamw_fused(&g, DS_HALF_F16, 4099, INFINITY, 65536.0, 1.0);  /* overflow: skipped */
    test_sgd(&g, 100003, 0.9f);
    test_sgd(&g, 100003, 0.0f);
    test_sumsq(&g, 124439808); /* GPT-2 124M's parameter count */
    test_sumsq(&g, 16385);
    test_sumsq(&g, 1);
    test_convert(&g);
    test_philox_vector(&g);
    ds_rng_key k1 = {0x0123456789ABCDEFull, 7, 3, 1, 0}, k2 = {42, 0, 0, 0, 0};
    test_dropout(&g, 1 << 22, 0.1f, k1);
    test_dropout(&g, 1000003, 0.5f, k2);
    test_dropout(&g, 10, 0.5f, k1);  /* n not a multiple of 4 */
    test_dropout(&g, 4097, 0.0f, k1); /* p = 0: copy / add */
    test_dropout(&g, 4097, 1.0f, k1); /* p = 1: all dropped */
    ds_rng_key k3 = {99, 2, 5, 1, 1000003}; /* a data-parallel rank's row offset: not */
    test_dropout(&g, 65541, 0.3f, k3);      /* a multiple of 4, the CPU's bits too */
    return gh_finish(&g);
}
