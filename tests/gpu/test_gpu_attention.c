/* Causal attention on the GPU against the CPU kernel: output, saved probabilities and the
 * accumulated dqkv; the same backward twice gives the same bits. The fused kernel
 * (attention_flash.cu) against the same reference, with its lse. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

/* Random inputs and the CPU kernels' results on them. */
typedef struct ref {
    size_t nqkv, nout, natt;
    float *qkv, *dout, *dqkv0; /* inputs; dqkv0: the gradient backward adds to */
    float *out, *att, *dqkv;   /* the CPU's forward and backward */
} ref;

static ref reference(gh *g, int B, int T, int C, int NH) {
    ref r = {.nqkv = (size_t)B * T * 3 * C, .nout = (size_t)B * T * C, .natt = (size_t)B * NH * T * T};
    r.qkv = gh_randf(g, r.nqkv, -1, 1), r.dout = gh_randf(g, r.nout, -1, 1);
    r.dqkv0 = gh_randf(g, r.nqkv, -1, 1);
    r.out = gh_alloc(r.nout * 4), r.att = gh_alloc(r.natt * 4);
    float *scratch = gh_alloc(r.natt * 4);
    ds_attention_forward(r.out, r.att, r.qkv, B, T, C, NH);
    r.dqkv = gh_copyf(r.dqkv0, r.nqkv);
    ds_attention_backward(r.dqkv, 1, scratch, r.dout, r.qkv, r.att, B, T, C, NH);
    free(scratch);
    return r;
}

static void ref_free(ref *r) {
    free(r->qkv), free(r->dout), free(r->dqkv0), free(r->out), free(r->att), free(r->dqkv);
}

static void test_attention(gh *g, int B, int T, int C, int NH) {
    char what[96];
    ref r = reference(g, B, T, C, NH);
    size_t nqkv = r.nqkv, nout = r.nout, natt = r.natt;
    float *qkv = r.qkv, *dout = r.dout, *dqkv0 = r.dqkv0, *out = r.out, *att = r.att, *dqkv = r.dqkv;

    float *d_qkv = gh_up(g, qkv, nqkv * 4), *d_dout = gh_up(g, dout, nout * 4);
    float *d_out = gh_zeros(g, nout * 4), *d_att = gh_zeros(g, natt * 4);
    float *d_scratch = gh_zeros(g, natt * 4);
    GH_OK(g, ds_cuda_attention_forward(g->ctx, d_out, d_att, d_qkv, B, T, C, NH));
    float *got = gh_downf(g, d_out, nout), *gatt = gh_downf(g, d_att, natt);
    snprintf(what, sizeof what, "attention fwd out B%d T%d C%d NH%d", B, T, C, NH);
    gh_close(g, what, got, out, nout, 1e-5f, 1e-4f);
    gh_close(g, "attention fwd probabilities", gatt, att, natt, 1e-6f, 1e-4f);
    free(got), free(gatt);

    float *runs[2];
    for (int r = 0; r < 2; r++) {
        float *d_dqkv = gh_up(g, dqkv0, nqkv * 4);
        /* from the CPU's probabilities, so only backward is compared */
        GH_OK(g, ds_cuda_to_device(g->ctx, d_att, att, natt * 4));
        GH_OK(g, ds_cuda_attention_backward(g->ctx, d_dqkv, 1, d_scratch, d_dout, d_qkv, d_att, B,
                                            T, C, NH));
        runs[r] = gh_downf(g, d_dqkv, nqkv);
        ds_cuda_free(g->ctx, d_dqkv);
    }
    snprintf(what, sizeof what, "attention bwd dqkv B%d T%d C%d NH%d", B, T, C, NH);
    gh_close(g, what, runs[0], dqkv, nqkv, 1e-5f, 1e-4f);
    gh_same_bits(g, "attention bwd dqkv twice", runs[0], runs[1], nqkv * 4);

    free(runs[0]), free(runs[1]);
    ref_free(&r);
    ds_cuda_free(g->ctx, d_qkv), ds_cuda_free(g->ctx, d_dout), ds_cuda_free(g->ctx, d_out);
    ds_cuda_free(g->ctx, d_att), ds_cuda_free(g->ctx, d_scratch);
}

/* The fused kernel against the CPU reference: out as ds_attention_forward's, lse as the
 * log of each row's sum of exp(score) computed here in double, dqkv (+=) as
 * ds_attention_backward's; twice the same bits. */
static void test_flash(gh *g, int B, int T, int C, int NH) {
    char what[96];
    int hs = C / NH;
    ref r = reference(g, B, T, C, NH);
    size_t nqkv = r.nqkv, nout = r.nout, nrow = (size_t)B * NH * T;
    float *qkv = r.qkv, *dout = r.dout, *dqkv0 = r.dqkv0, *out = r.out, *dqkv = r.dqkv;
    float *lse = gh_alloc(nrow * 4);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
                double mx = -1e300, sum = 0, s[T > 0 ? T : 1];
                for (int j = 0; j <= i; j++) {
                    const float *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    double acc = 0;
                    for (int d = 0; d < hs; d++) acc += (double)q[d] * k[d];
                    s[j] = acc / sqrt((double)hs);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= i; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + i] = (float)(mx + log(sum));
            }

    float *d_qkv = gh_up(g, qkv, nqkv * 4), *d_dout = gh_up(g, dout, nout * 4);
    float *d_out = gh_zeros(g, nout * 4), *d_lse = gh_zeros(g, nrow * 4);
    float *d_scratch = gh_zeros(g, nrow * 4);
    ds_rng_key none = {0};
    GH_OK(g, ds_cuda_flash_attention_forward(g->ctx, d_out, d_lse, d_qkv, B, T, C, NH, 0.0f, none));
    float *got = gh_downf(g, d_out, nout), *glse = gh_downf(g, d_lse, nrow);
    snprintf(what, sizeof what, "flash attention fwd out B%d T%d C%d NH%d", B, T, C, NH);
    gh_close(g, what, got, out, nout, 2e-5f, 1e-4f);
    gh_close(g, "flash attention fwd lse", glse, lse, nrow, 1e-5f, 1e-5f);
    free(got), free(glse);

    float *runs[2];
    for (int r = 0; r < 2; r++) {
        float *d_dqkv = gh_up(g, dqkv0, nqkv * 4);
        GH_OK(g, ds_cuda_flash_attention_backward(g->ctx, d_dqkv, 1, d_scratch, d_dout, d_qkv,
                                                  d_out, d_lse, B, T, C, NH, 0.0f, none));
        runs[r] = gh_downf(g, d_dqkv, nqkv);
        ds_cuda_free(g->ctx, d_dqkv);
    }
    snprintf(what, sizeof what, "flash attention bwd dqkv B%d T%d C%d NH%d", B, T, C, NH);
    gh_close(g, what, runs[0], dqkv, nqkv, 2e-5f, 2e-4f);
    gh_same_bits(g, "flash attention bwd dqkv twice", runs[0], runs[1], nqkv * 4);

    free(runs[0]), free(runs[1]), free(lse);
    ref_free(&r);
    ds_cuda_free(g->ctx, d_qkv), ds_cuda_free(g->ctx, d_dout), ds_cuda_free(g->ctx, d_out);
    ds_cuda_free(g->ctx, d_lse), ds_cuda_free(g->ctx, d_scratch);
}

static void test_flash_refuses(gh *g) {
    gh_expect(g, "flash attention refuses head size 160",
              ds_cuda_flash_attention_forward(g->ctx, (float *)16, (float *)16, (const float *)16,
                                              1, 4, 320, 2, 0.0f, (ds_rng_key){0}) == -1 &&
                  strstr(ds_cuda_ctx_error(g->ctx), "head size 160") != NULL);
}

int main(void) {
    gh g;
    gh_init(&g, "test_gpu_attention");
    test_attention(&g, 2, 64, 128, 4);  /* head size 32 */
    test_attention(&g, 1, 300, 96, 2);  /* rows longer than a block, head size 48 */
    test_attention(&g, 4, 256, 768, 12); /* GPT-2 124M heads */
    test_attention(&g, 1, 1, 8, 1);      /* a single position */
    test_flash(&g, 2, 64, 128, 4);     /* head size 32, one block of rows */
    test_flash(&g, 1, 300, 128, 2);    /* head size 64, T not a multiple of the tiles */
    test_flash(&g, 2, 256, 768, 12);   /* GPT-2 124M heads */
    test_flash(&g, 1, 130, 256, 2);    /* head size 128 */
    test_flash(&g, 2, 67, 64, 4);      /* head size 16 (the example GPT's) */
    test_flash(&g, 1, 300, 96, 2);     /* head size 48: 64 registers, 16 of them zero */
    test_flash(&g, 1, 1, 64, 1);       /* a single position */
    test_flash_refuses(&g);
    return gh_finish(&g);
}
