/* Matmul (cuBLAS), elementwise, GELU and LayerNorm on the GPU against the CPU kernels,
 * and the same backward call twice giving the same bits. Inputs uniform in [-1, 1]. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

/* fp32 GEMMs summing K products of O(1) values: cuBLAS and OpenBLAS order them
 * differently; errors grow like sqrt(K) * 2^-24 * |sum of magnitudes| */
#define GEMM_ATOL 2e-4f
#define GEMM_RTOL 1e-4f

static void test_matmul(gh *g, int N, int C, int OC) {
    char what[96];
    float *inp = gh_randf(g, (size_t)N * C, -1, 1), *w = gh_randf(g, (size_t)OC * C, -1, 1);
    float *b = gh_randf(g, OC, -1, 1), *dout = gh_randf(g, (size_t)N * OC, -1, 1);
    /* gradients start non-zero: backward must add */
    float *dinp0 = gh_randf(g, (size_t)N * C, -1, 1), *dw0 = gh_randf(g, (size_t)OC * C, -1, 1);
    float *db0 = gh_randf(g, OC, -1, 1);
    float *d_inp = gh_up(g, inp, (size_t)N * C * 4), *d_w = gh_up(g, w, (size_t)OC * C * 4);
    float *d_b = gh_up(g, b, OC * 4), *d_dout = gh_up(g, dout, (size_t)N * OC * 4);
    float *d_out = gh_zeros(g, (size_t)N * OC * 4);

    float *out = gh_alloc((size_t)N * OC * 4);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        ds_matmul_forward(out, inp, w, with_bias ? b : NULL, N, C, OC);
        GH_OK(g, ds_cuda_matmul_forward(g->ctx, d_out, d_inp, d_w, with_bias ? d_b : NULL, N, C, OC));
        float *got = gh_downf(g, d_out, (size_t)N * OC);
        snprintf(what, sizeof what, "matmul fwd %dx%dx%d%s", N, C, OC, with_bias ? " +bias" : "");
        gh_close(g, what, got, out, (size_t)N * OC, GEMM_ATOL, GEMM_RTOL);
        free(got);
    }

    float *dinp = gh_copyf(dinp0, (size_t)N * C), *dw = gh_copyf(dw0, (size_t)OC * C);
    float *db = gh_copyf(db0, OC);
    ds_matmul_backward(dinp, 1, dw, db, dout, inp, w, N, C, OC);
    float *runs[2][3];
    for (int r = 0; r < 2; r++) {
        float *d_dinp = gh_up(g, dinp0, (size_t)N * C * 4), *d_dw = gh_up(g, dw0, (size_t)OC * C * 4);
        float *d_db = gh_up(g, db0, OC * 4);
        GH_OK(g,
              ds_cuda_matmul_backward(g->ctx, d_dinp, 1, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
        runs[r][0] = gh_downf(g, d_dinp, (size_t)N * C);
        runs[r][1] = gh_downf(g, d_dw, (size_t)OC * C);
        runs[r][2] = gh_downf(g, d_db, OC);
        ds_cuda_free(g->ctx, d_dinp), ds_cuda_free(g->ctx, d_dw), ds_cuda_free(g->ctx, d_db);
    }
    snprintf(what, sizeof what, "matmul bwd dinp %dx%dx%d", N, C, OC);
    gh_close(g, what, runs[0][0], dinp, (size_t)N * C, GEMM_ATOL, GEMM_RTOL);
    snprintf(what, sizeof what, "matmul bwd dweight %dx%dx%d", N, C, OC);
    gh_close(g, what, runs[0][1], dw, (size_t)OC * C, GEMM_ATOL * 4, GEMM_RTOL);
    snprintf(what, sizeof what, "matmul bwd dbias %dx%dx%d", N, C, OC);
    gh_close(g, what, runs[0][2], db, OC, 1e-4f, 1e-5f);
    gh_same_bits(g, "matmul bwd dinp twice", runs[0][0], runs[1][0], (size_t)N * C * 4);
    gh_same_bits(g, "matmul bwd dweight twice", runs[0][1], runs[1][1], (size_t)OC * C * 4);
    gh_same_bits(g, "matmul bwd dbias twice", runs[0][2], runs[1][2], (size_t)OC * 4);

    /* only dbias wanted (NULL dinp and dweight) */
    float *d_db = gh_up(g, db0, OC * 4);
    GH_OK(g, ds_cuda_matmul_backward(g->ctx, NULL, 1, NULL, d_db, d_dout, NULL, NULL, N, C, OC));
    float *got = gh_downf(g, d_db, OC);
    gh_same_bits(g, "matmul bwd dbias alone = with the others", got, runs[0][2], (size_t)OC * 4);
    free(got);
    ds_cuda_free(g->ctx, d_db);

    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) free(runs[r][k]);
    free(inp), free(w), free(b), free(dout), free(dinp0), free(dw0), free(db0), free(out);
    free(dinp), free(dw), free(db);
    ds_cuda_free(g->ctx, d_inp), ds_cuda_free(g->ctx, d_w), ds_cuda_free(g->ctx, d_b);
    ds_cuda_free(g->ctx, d_dout), ds_cuda_free(g->ctx, d_out);
}

static void test_elementwise(gh *g, size_t n) {
    float *a = gh_randf(g, n, -4, 4), *b = gh_randf(g, n, -4, 4), *acc0 = gh_randf(g, n, -1, 1);
    float *d_a = gh_up(g, a, n * 4), *d_b = gh_up(g, b, n * 4), *d_o = gh_zeros(g, n * 4);
    float *want = gh_alloc(n * 4), *got;

    ds_add_forward(want, a, b, n);
    GH_OK(g, ds_cuda_add_forward(g->ctx, d_o, d_a, d_b, n));
    got = gh_downf(g, d_o, n);
    gh_same_bits(g, "add", got, want, n * 4);
    free(got);

    memcpy(want, acc0, n * 4);
    ds_accumulate(want, a, n);
    ds_scale(want, 0.37f, n);
    GH_OK(g, ds_cuda_to_device(g->ctx, d_o, acc0, n * 4));
    GH_OK(g, ds_cuda_accumulate(g->ctx, d_o, d_a, n));
    GH_OK(g, ds_cuda_scale(g->ctx, d_o, 0.37f, n));
    got = gh_downf(g, d_o, n);
    gh_same_bits(g, "accumulate then scale", got, want, n * 4);
    free(got);

    /* GELU: the same formula (kernel_math.h); FMA contraction may move the last bits */
    ds_gelu_forward(want, a, n);
    GH_OK(g, ds_cuda_gelu_forward(g->ctx, d_o, d_a, n));
    got = gh_downf(g, d_o, n);
    gh_close(g, "gelu fwd", got, want, n, 1e-6f, 1e-5f);
    free(got);

    memcpy(want, acc0, n * 4);
    ds_gelu_backward(want, 1, a, b, n);
    GH_OK(g, ds_cuda_to_device(g->ctx, d_o, acc0, n * 4));
    GH_OK(g, ds_cuda_gelu_backward(g->ctx, d_o, 1, d_a, d_b, n));
    got = gh_downf(g, d_o, n);
    gh_close(g, "gelu bwd (accumulating)", got, want, n, 1e-5f, 1e-5f);
    free(got);

    free(a), free(b), free(acc0), free(want);
    ds_cuda_free(g->ctx, d_a), ds_cuda_free(g->ctx, d_b), ds_cuda_free(g->ctx, d_o);
}

static void test_layernorm(gh *g, int N, int C, int affine) {
    char what[96];
    size_t NC = (size_t)N * C;
    float *x = gh_randf(g, NC, -2, 3), *w = gh_randf(g, C, 0.5f, 1.5f), *b = gh_randf(g, C, -1, 1);
    float *dy = gh_randf(g, NC, -1, 1), *dx0 = gh_randf(g, NC, -1, 1);
    float *dw0 = gh_randf(g, C, -1, 1), *db0 = gh_randf(g, C, -1, 1);
    const float *W = affine ? w : NULL, *Bi = affine ? b : NULL;
    float *out = gh_alloc(NC * 4), *mean = gh_alloc(N * 4), *rstd = gh_alloc(N * 4);
    ds_layernorm_forward(out, mean, rstd, x, W, Bi, N, C, 1e-5f);
    float *dx = gh_copyf(dx0, NC), *dw = gh_copyf(dw0, C), *db = gh_copyf(db0, C);
    ds_layernorm_backward(dx, 1, affine ? dw : NULL, affine ? db : NULL, dy, x, W, mean, rstd, N,
                          C);

    float *d_x = gh_up(g, x, NC * 4), *d_w = gh_up(g, w, C * 4), *d_b = gh_up(g, b, C * 4);
    float *d_dy = gh_up(g, dy, NC * 4), *d_out = gh_zeros(g, NC * 4);
    float *d_mean = gh_zeros(g, N * 4), *d_rstd = gh_zeros(g, N * 4);
    GH_OK(g, ds_cuda_layernorm_forward(g->ctx, d_out, d_mean, d_rstd, d_x, affine ? d_w : NULL,
                                       affine ? d_b : NULL, N, C, 1e-5f));
    float *got = gh_downf(g, d_out, NC), *gm = gh_downf(g, d_mean, N), *gr = gh_downf(g, d_rstd, N);
    snprintf(what, sizeof what, "layernorm fwd %dx%d%s", N, C, affine ? " affine" : "");
    gh_close(g, what, got, out, NC, 1e-5f, 1e-5f);
    gh_close(g, "layernorm fwd mean", gm, mean, N, 1e-6f, 1e-5f);
    gh_close(g, "layernorm fwd rstd", gr, rstd, N, 1e-6f, 1e-5f);
    free(got), free(gm), free(gr);

    float *runs[2][3];
    for (int r = 0; r < 2; r++) {
        float *d_dx = gh_up(g, dx0, NC * 4), *d_dw = gh_up(g, dw0, C * 4), *d_db = gh_up(g, db0, C * 4);
        /* backward from the CPU's saved statistics, so only backward is compared */
        GH_OK(g, ds_cuda_to_device(g->ctx, d_mean, mean, N * 4));
        GH_OK(g, ds_cuda_to_device(g->ctx, d_rstd, rstd, N * 4));
        GH_OK(g, ds_cuda_layernorm_backward(g->ctx, d_dx, 1, affine ? d_dw : NULL,
                                            affine ? d_db : NULL, d_dy, d_x, affine ? d_w : NULL,
                                            d_mean, d_rstd, N, C));
        runs[r][0] = gh_downf(g, d_dx, NC);
        runs[r][1] = gh_downf(g, d_dw, C);
        runs[r][2] = gh_downf(g, d_db, C);
        ds_cuda_free(g->ctx, d_dx), ds_cuda_free(g->ctx, d_dw), ds_cuda_free(g->ctx, d_db);
    }
    snprintf(what, sizeof what, "layernorm bwd dinp %dx%d", N, C);
    gh_close(g, what, runs[0][0], dx, NC, 1e-5f, 1e-4f);
    gh_close(g, "layernorm bwd dweight", runs[0][1], dw, C, 1e-4f, 1e-5f);
    gh_close(g, "layernorm bwd dbias", runs[0][2], db, C, 1e-4f, 1e-5f);
    gh_same_bits(g, "layernorm bwd dinp twice", runs[0][0], runs[1][0], NC * 4);
    gh_same_bits(g, "layernorm bwd dweight twice", runs[0][1], runs[1][1], C * 4);
    gh_same_bits(g, "layernorm bwd dbias twice", runs[0][2], runs[1][2], C * 4);
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 3; k++) free(runs[r][k]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(out), free(mean);
    free(rstd), free(dx), free(dw), free(db);
    ds_cuda_free(g->ctx, d_x), ds_cuda_free(g->ctx, d_w), ds_cuda_free(g->ctx, d_b);
    ds_cuda_free(g->ctx, d_dy), ds_cuda_free(g->ctx, d_out), ds_cuda_free(g->ctx, d_mean);
    ds_cuda_free(g->ctx, d_rstd);
}

/* TF32 tensor cores on request (10-bit mantissas: loose tolerance), then back to fp32; and
 * the same backward on a stream of its own gives the default stream's bits. */
static void test_tf32_and_stream(gh *g, int N, int C, int OC) {
    float *inp = gh_randf(g, (size_t)N * C, -1, 1), *w = gh_randf(g, (size_t)OC * C, -1, 1);
    float *dout = gh_randf(g, (size_t)N * OC, -1, 1), *out = gh_alloc((size_t)N * OC * 4);
    float *d_inp = gh_up(g, inp, (size_t)N * C * 4), *d_w = gh_up(g, w, (size_t)OC * C * 4);
    float *d_dout = gh_up(g, dout, (size_t)N * OC * 4), *d_out = gh_zeros(g, (size_t)N * OC * 4);
    ds_matmul_forward(out, inp, w, NULL, N, C, OC);
    GH_OK(g, ds_cuda_ctx_set_tf32(g->ctx, 1));
    GH_OK(g, ds_cuda_matmul_forward(g->ctx, d_out, d_inp, d_w, NULL, N, C, OC));
    GH_OK(g, ds_cuda_ctx_set_tf32(g->ctx, 0));
    float *got = gh_downf(g, d_out, (size_t)N * OC);
    gh_close(g, "matmul fwd with TF32", got, out, (size_t)N * OC, 3e-2f, 1e-2f);
    free(got);

    float *runs[2];
    cudaStream_t st = NULL;
    if (cudaStreamCreate(&st) != cudaSuccess) {
        fprintf(stderr, "cudaStreamCreate failed\n");
        exit(1);
    }
    for (int r = 0; r < 2; r++) {
        GH_OK(g, ds_cuda_ctx_set_stream(g->ctx, r ? (void *)st : NULL));
        float *d_dw = gh_zeros(g, (size_t)OC * C * 4), *d_db = gh_zeros(g, (size_t)OC * 4);
        GH_OK(g,
              ds_cuda_matmul_backward(g->ctx, NULL, 1, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
        runs[r] = gh_downf(g, d_dw, (size_t)OC * C);
        ds_cuda_free(g->ctx, d_dw), ds_cuda_free(g->ctx, d_db);
    }
    GH_OK(g, ds_cuda_ctx_set_stream(g->ctx, NULL));
    cudaStreamDestroy(st);
    gh_same_bits(g, "matmul bwd dweight: own stream = default stream", runs[0], runs[1],
                 (size_t)OC * C * 4);
    free(runs[0]), free(runs[1]), free(inp), free(w), free(dout), free(out);
    ds_cuda_free(g->ctx, d_inp), ds_cuda_free(g->ctx, d_w), ds_cuda_free(g->ctx, d_dout);
    ds_cuda_free(g->ctx, d_out);
}

/* 16-bit in, 16-bit out through cuBLASLt: the CPU reference computes in fp32 on the
 * same 16-bit inputs and rounds its result once; the tolerance is a few units of the
 * 16-bit type's last place (bf16: 2^-8 relative, fp16: 2^-11). */
static uint16_t *to16(ds_half h, const float *x, size_t n) {
    uint16_t *r = gh_alloc(n * 2);
    ds_half_from_f32(h, r, x, n);
    return r;
}
static float *from16(ds_half h, const uint16_t *x, size_t n) {
    float *r = gh_alloc(n * 4);
    ds_half_to_f32(h, r, x, n);
    return r;
}
static float *down16(gh *g, ds_half h, const void *d, size_t n) {
    uint16_t *t = gh_alloc(n * 2);
    gh_down(g, t, d, n * 2);
    float *r = from16(h, t, n);
    free(t);
    return r;
}

static void test_matmul_half(gh *g, ds_half h, int N, int C, int OC) {
    char what[128];
    const char *hn = h == DS_HALF_BF16 ? "bf16" : "f16";
    float atol = h == DS_HALF_BF16 ? 3e-2f : 4e-3f, rtol = h == DS_HALF_BF16 ? 1.6e-2f : 2e-3f;
    size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x0 = gh_randf(g, nx, -1, 1), *w0 = gh_randf(g, nw, -1, 1), *b0 = gh_randf(g, OC, -1, 1);
    float *dy0 = gh_randf(g, ny, -1, 1);
    uint16_t *x16 = to16(h, x0, nx), *w16 = to16(h, w0, nw), *b16 = to16(h, b0, OC), *dy16 = to16(h, dy0, ny);
    float *x = from16(h, x16, nx), *w = from16(h, w16, nw), *b = from16(h, b16, OC), *dy = from16(h, dy16, ny);
    void *X = gh_up(g, x16, nx * 2), *W = gh_up(g, w16, nw * 2), *Bd = gh_up(g, b16, OC * 2);
    void *DY = gh_up(g, dy16, ny * 2), *Y = gh_zeros(g, ny * 2), *PRE = gh_zeros(g, ny * 2);
    float *y = gh_alloc(ny * 4), *gl = gh_alloc(ny * 4);

    ds_matmul_forward(y, x, w, b, N, C, OC);
    GH_OK(g, ds_cuda_matmul_forward_half(g->ctx, h, Y, X, W, Bd, NULL, N, C, OC));
    float *got = down16(g, h, Y, ny);
    snprintf(what, sizeof what, "matmul fwd %s +bias (cuBLASLt) %dx%dx%d", hn, N, C, OC);
    gh_close(g, what, got, y, ny, atol, rtol);
    free(got);
    /* without a bias: the DEFAULT and GELU_AUX epilogues (no bias pointer at all) */
    float *y0 = gh_alloc(ny * 4);
    ds_matmul_forward(y0, x, w, NULL, N, C, OC);
    GH_OK(g, ds_cuda_matmul_forward_half(g->ctx, h, Y, X, W, NULL, NULL, N, C, OC));
    got = down16(g, h, Y, ny);
    snprintf(what, sizeof what, "matmul fwd %s no bias (cuBLASLt) %dx%dx%d", hn, N, C, OC);
    gh_close(g, what, got, y0, ny, atol, rtol);
    free(got);
    if (OC % 8 == 0) {
        ds_gelu_forward(gl, y0, ny);
        GH_OK(g, ds_cuda_matmul_forward_half(g->ctx, h, Y, X, W, NULL, PRE, N, C, OC));
        got = down16(g, h, Y, ny);
        snprintf(what, sizeof what, "matmul fwd %s +gelu epilogue, no bias", hn);
        gh_close(g, what, got, gl, ny, atol, rtol);
        free(got);
    }
    free(y0);
    if (OC % 8 == 0) {
        ds_gelu_forward(gl, y, ny);
        GH_OK(g, ds_cuda_matmul_forward_half(g->ctx, h, Y, X, W, Bd, PRE, N, C, OC));
        got = down16(g, h, Y, ny);
        snprintf(what, sizeof what, "matmul fwd %s +bias +gelu epilogue", hn);
        gh_close(g, what, got, gl, ny, atol, rtol);
        free(got);
        got = down16(g, h, PRE, ny);
        gh_close(g, "  its saved pre-gelu values", got, y, ny, atol, rtol);
        free(got);
    }

    /* backward: dinp, dweight, dbias accumulate into non-zero 16-bit gradients */
    float *dx0 = gh_randf(g, nx, -1, 1), *dw0 = gh_randf(g, nw, -1, 1), *db0 = gh_randf(g, OC, -1, 1);
    uint16_t *dx16 = to16(h, dx0, nx), *dw16 = to16(h, dw0, nw), *db16 = to16(h, db0, OC);
    float *dx = from16(h, dx16, nx), *dw = from16(h, dw16, nw), *db = from16(h, db16, OC);
    void *DX = gh_up(g, dx16, nx * 2), *DW = gh_up(g, dw16, nw * 2), *DB = gh_up(g, db16, OC * 2);
    ds_matmul_backward(dx, 1, dw, db, dy, x, w, N, C, OC);
    GH_OK(g, ds_cuda_matmul_backward_half(g->ctx, h, DX, DW, DB, DY, X, W, NULL, N, C, OC));
    snprintf(what, sizeof what, "matmul bwd %s dinp (+=)", hn);
    got = down16(g, h, DX, nx), gh_close(g, what, got, dx, nx, atol, rtol), free(got);
    snprintf(what, sizeof what, "matmul bwd %s dweight (+=)", hn);
    got = down16(g, h, DW, nw), gh_close(g, what, got, dw, nw, 4 * atol, rtol), free(got);
    snprintf(what, sizeof what, "matmul bwd %s dbias (+=)", hn);
    got = down16(g, h, DB, OC), gh_close(g, what, got, db, OC, 4 * atol, rtol), free(got);

    /* the GELU's backward fused into dinp: dinp = (dout @ W) * gelu'(pre), pre [N, C] */
    if (C % 8 == 0) {
        float *pre0 = gh_randf(g, nx, -3, 3), *zero = gh_alloc(nx * 4), *want = gh_alloc(nx * 4);
        uint16_t *pre16 = to16(h, pre0, nx);
        float *pre = from16(h, pre16, nx);
        memset(zero, 0, nx * 4);
        ds_matmul_backward(zero, 1, NULL, NULL, dy, NULL, w, N, C, OC);
        for (size_t i = 0; i < nx; i++) {
            float d[1] = {0}, one[1] = {1.0f};
            ds_gelu_backward(d, 1, pre + i, one, 1);
            want[i] = zero[i] * d[0];
        }
        void *PR = gh_up(g, pre16, nx * 2);
        GH_OK(g, ds_cuda_matmul_backward_half(g->ctx, h, DX, NULL, NULL, DY, NULL, W, PR, N, C, OC));
        snprintf(what, sizeof what, "matmul bwd %s dinp with the dgelu epilogue (=)", hn);
        got = down16(g, h, DX, nx), gh_close(g, what, got, want, nx, atol, rtol), free(got);
        free(pre0), free(zero), free(want), free(pre16), free(pre);
        ds_cuda_free(g->ctx, PR);
    }
    free(x0), free(w0), free(b0), free(dy0), free(x16), free(w16), free(b16), free(dy16);
    free(x), free(w), free(b), free(dy), free(y), free(gl), free(dx0), free(dw0), free(db0);
    free(dx16), free(dw16), free(db16), free(dx), free(dw), free(db);
    ds_cuda_free(g->ctx, X), ds_cuda_free(g->ctx, W), ds_cuda_free(g->ctx, Bd);
    ds_cuda_free(g->ctx, DY), ds_cuda_free(g->ctx, Y), ds_cuda_free(g->ctx, PRE);
    ds_cuda_free(g->ctx, DX), ds_cuda_free(g->ctx, DW), ds_cuda_free(g->ctx, DB);
}

static void test_bad_arguments(gh *g) {
    gh_expect(g, "matmul with N = 0 is refused",
              ds_cuda_matmul_forward(g->ctx, NULL, NULL, NULL, NULL, 0, 4, 4) == -1 &&
                  ds_cuda_ctx_error(g->ctx)[0] != '\0');
    gh_expect(g, "attention with C % NH != 0 is refused",
              ds_cuda_attention_forward(g->ctx, (float *)8, (float *)8, (float *)8, 1, 4, 10, 3) == -1);
}

int main(void) {
    gh g;
    gh_init(&g, "test_gpu_dense");
    test_matmul(&g, 64, 48, 40);      /* small, odd sizes */
    test_matmul(&g, 1024, 768, 2304); /* GPT-2 124M qkv projection, B*T = 1024 */
    test_matmul(&g, 1000, 768, 3072); /* fc, rows not a multiple of the colsum group */
    test_elementwise(&g, 1000003);
    test_elementwise(&g, 7);
    test_layernorm(&g, 1024, 768, 1);
    test_layernorm(&g, 37, 100, 1);
    test_layernorm(&g, 5, 33, 0);
    test_tf32_and_stream(&g, 1024, 768, 768);
    test_matmul_half(&g, DS_HALF_BF16, 1024, 768, 3072); /* GPT-2 fc: gelu fused */
    test_matmul_half(&g, DS_HALF_BF16, 1024, 3072, 768); /* fc proj: dgelu fused */
    test_matmul_half(&g, DS_HALF_F16, 256, 768, 2304);
    test_matmul_half(&g, DS_HALF_BF16, 64, 48, 44);      /* OC not a multiple of 8 */
    test_bad_arguments(&g);
    return gh_finish(&g);
}
