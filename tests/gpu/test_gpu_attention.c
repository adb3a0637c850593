/* Causal attention on the GPU against the CPU kernel: output, saved probabilities and the
 * accumulated dqkv; the same backward twice gives the same bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static void test_attention(gh *g, int B, int T, int C, int NH) {
    char what[96];
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = gh_randf(g, nqkv, -1, 1), *dout = gh_randf(g, nout, -1, 1);
    float *dqkv0 = gh_randf(g, nqkv, -1, 1);
    float *out = gh_alloc(nout * 4), *att = gh_alloc(natt * 4), *scratch = gh_alloc(natt * 4);
    ds_attention_forward(out, att, qkv, B, T, C, NH);
    float *dqkv = gh_copyf(dqkv0, nqkv);
    ds_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);

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
        GH_OK(g, ds_cuda_attention_backward(g->ctx, d_dqkv, d_scratch, d_dout, d_qkv, d_att, B, T,
                                            C, NH));
        runs[r] = gh_downf(g, d_dqkv, nqkv);
        ds_cuda_free(g->ctx, d_dqkv);
    }
    snprintf(what, sizeof what, "attention bwd dqkv B%d T%d C%d NH%d", B, T, C, NH);
    gh_close(g, what, runs[0], dqkv, nqkv, 1e-5f, 1e-4f);
    gh_same_bits(g, "attention bwd dqkv twice", runs[0], runs[1], nqkv * 4);

    free(runs[0]), free(runs[1]), free(qkv), free(dout), free(dqkv0), free(out), free(att);
    free(scratch), free(dqkv);
    ds_cuda_free(g->ctx, d_qkv), ds_cuda_free(g->ctx, d_dout), ds_cuda_free(g->ctx, d_out);
    ds_cuda_free(g->ctx, d_att), ds_cuda_free(g->ctx, d_scratch);
}

int main(void) {
    gh g;
    gh_init(&g, "test_gpu_attention");
    test_attention(&g, 2, 64, 128, 4);  /* head size 32 */
    test_attention(&g, 1, 300, 96, 2);  /* rows longer than a block, head size 48 */
    test_attention(&g, 4, 256, 768, 12); /* GPT-2 124M heads */
    test_attention(&g, 1, 1, 8, 1);      /* a single position */
    return gh_finish(&g);
}
