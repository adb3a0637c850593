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
    ds_matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    float *runs[2][3];
    for (int r = 0; r < 2; r++) {
        float *d_dinp = gh_up(g, dinp0, (size_t)N * C * 4), *d_dw = gh_up(g, dw0, (size_t)OC * C * 4);
        float *d_db = gh_up(g, db0, OC * 4);
        GH_OK(g, ds_cuda_matmul_backward(g->ctx, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
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
    GH_OK(g, ds_cuda_matmul_backward(g->ctx, NULL, NULL, d_db, d_dout, NULL, NULL, N, C, OC));
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
    ds_gelu_backward(want, a, b, n);
    GH_OK(g, ds_cuda_to_device(g->ctx, d_o, acc0, n * 4));
    GH_OK(g, ds_cuda_gelu_backward(g->ctx, d_o, d_a, d_b, n));
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
    ds_layernorm_backward(dx, affine ? dw : NULL, affine ? db : NULL, dy, x, W, mean, rstd, N, C);

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
        GH_OK(g, ds_cuda_layernorm_backward(g->ctx, d_dx, affine ? d_dw : NULL,
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
        GH_OK(g, ds_cuda_matmul_backward(g->ctx, NULL, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
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
    test_bad_arguments(&g);
    return gh_finish(&g);
}
