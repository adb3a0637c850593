/* Cross-entropy (forward, backward, fused, fused in place) and embedding on the GPU
 * against the CPU kernels. Embedding backward adds each id's rows in the CPU's order, so
 * it must match bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

static void test_crossentropy(gh *g, int N, int V) {
    char what[96];
    size_t NV = (size_t)N * V;
    float *logits = gh_randf(g, NV, -8, 8), *dl0 = gh_randf(g, NV, -1, 1);
    int32_t *tg = gh_alloc((size_t)N * 4);
    for (int n = 0; n < N; n++) tg[n] = n % 7 == 3 ? -1 : (int32_t)(gh_rand_u32(g) % (uint32_t)V);
    float dloss = 1.0f / N;
    float *losses = gh_alloc((size_t)N * 4), *dl = gh_copyf(dl0, NV), *fused = gh_alloc(NV * 4);
    double total = ds_crossentropy_forward(losses, logits, tg, N, V);
    ds_crossentropy_backward(dl, logits, tg, dloss, N, V);
    float *losses2 = gh_alloc((size_t)N * 4);
    double total2 = ds_crossentropy_forward_backward(losses2, fused, logits, tg, dloss, N, V);

    float *d_logits = gh_up(g, logits, NV * 4), *d_dl = gh_up(g, dl0, NV * 4);
    int32_t *d_tg = gh_up(g, tg, (size_t)N * 4);
    float *d_losses = gh_zeros(g, (size_t)N * 4);
    double gtotal = 0.0;
    GH_OK(g, ds_cuda_crossentropy_forward(g->ctx, d_losses, d_logits, d_tg, N, V, &gtotal));
    float *got = gh_downf(g, d_losses, N);
    snprintf(what, sizeof what, "crossentropy fwd losses N%d V%d", N, V);
    gh_close(g, what, got, losses, N, 1e-5f, 1e-5f);
    gh_expect(g, "crossentropy fwd total", fabs(gtotal - total) <= 1e-5 * N + 1e-5 * fabs(total));
    free(got);

    GH_OK(g, ds_cuda_crossentropy_backward(g->ctx, d_dl, d_logits, d_tg, dloss, N, V));
    got = gh_downf(g, d_dl, NV);
    gh_close(g, "crossentropy bwd (over a random buffer)", got, dl, NV, 1e-7f, 5e-5f);
    /* in place, as the criterion runs it: the same bits as into a separate buffer */
    float *d_over = gh_up(g, logits, NV * 4);
    GH_OK(g, ds_cuda_crossentropy_backward(g->ctx, d_over, d_over, d_tg, dloss, N, V));
    float *over = gh_downf(g, d_over, NV);
    gh_same_bits(g, "crossentropy bwd in place = separate", over, got, NV * 4);
    free(over), free(got);
    ds_cuda_free(g->ctx, d_over);

    GH_OK(g, ds_cuda_crossentropy_forward_backward(g->ctx, d_losses, d_dl, d_logits, d_tg, dloss,
                                                   N, V, &gtotal));
    got = gh_downf(g, d_dl, NV);
    float *gl = gh_downf(g, d_losses, N);
    gh_close(g, "crossentropy fused dlogits", got, fused, NV, 1e-7f, 5e-5f);
    gh_close(g, "crossentropy fused losses", gl, losses2, N, 1e-5f, 1e-5f);
    gh_expect(g, "crossentropy fused total", fabs(gtotal - total2) <= 1e-5 * N + 1e-5 * fabs(total2));
    /* in place: dlogits is the logits buffer; same bits as into a separate buffer */
    GH_OK(g, ds_cuda_crossentropy_forward_backward(g->ctx, d_losses, d_logits, d_logits, d_tg,
                                                   dloss, N, V, NULL));
    float *inplace = gh_downf(g, d_logits, NV);
    gh_same_bits(g, "crossentropy fused in place = separate", inplace, got, NV * 4);
    free(inplace), free(got), free(gl);

    free(logits), free(dl0), free(tg), free(losses), free(dl), free(fused), free(losses2);
    ds_cuda_free(g->ctx, d_logits), ds_cuda_free(g->ctx, d_dl), ds_cuda_free(g->ctx, d_tg);
    ds_cuda_free(g->ctx, d_losses);
}

static void test_embedding(gh *g, int N, int C, int vocab) {
    char what[96];
    float *table = gh_randf(g, (size_t)vocab * C, -1, 1), *dout = gh_randf(g, (size_t)N * C, -1, 1);
    float *dt0 = gh_randf(g, (size_t)vocab * C, -1, 1);
    int32_t *ids = gh_alloc((size_t)N * 4);
    /* many repeats: a few frequent ids and a tail */
    for (int n = 0; n < N; n++)
        ids[n] = (int32_t)(n % 3 == 0 ? gh_rand_u32(g) % 4u : gh_rand_u32(g) % (uint32_t)vocab);
    float *out = gh_alloc((size_t)N * C * 4), *dt = gh_copyf(dt0, (size_t)vocab * C);
    ds_embedding_forward(out, ids, table, N, C);
    ds_embedding_backward(dt, dout, ids, N, C);

    float *d_table = gh_up(g, table, (size_t)vocab * C * 4), *d_dout = gh_up(g, dout, (size_t)N * C * 4);
    int32_t *d_ids = gh_up(g, ids, (size_t)N * 4);
    float *d_out = gh_zeros(g, (size_t)N * C * 4);
    GH_OK(g, ds_cuda_embedding_forward(g->ctx, d_out, d_ids, d_table, N, C));
    float *got = gh_downf(g, d_out, (size_t)N * C);
    snprintf(what, sizeof what, "embedding fwd N%d C%d", N, C);
    gh_same_bits(g, what, got, out, (size_t)N * C * 4);
    free(got);
    for (int r = 0; r < 2; r++) {
        float *d_dt = gh_up(g, dt0, (size_t)vocab * C * 4);
        GH_OK(g, ds_cuda_embedding_backward(g->ctx, d_dt, d_dout, d_ids, N, C));
        got = gh_downf(g, d_dt, (size_t)vocab * C);
        snprintf(what, sizeof what, "embedding bwd = CPU bits N%d C%d (run %d)", N, C, r + 1);
        gh_same_bits(g, what, got, dt, (size_t)vocab * C * 4);
        free(got);
        ds_cuda_free(g->ctx, d_dt);
    }
    free(table), free(dout), free(dt0), free(ids), free(out), free(dt);
    ds_cuda_free(g->ctx, d_table), ds_cuda_free(g->ctx, d_dout), ds_cuda_free(g->ctx, d_ids);
    ds_cuda_free(g->ctx, d_out);
}

int main(void) {
    gh g;
    gh_init(&g, "test_gpu_loss");
    test_crossentropy(&g, 64, 50257); /* GPT-2's vocabulary */
    test_crossentropy(&g, 33, 1000);
    test_crossentropy(&g, 3, 5);
    test_embedding(&g, 4096, 768, 1000);
    test_embedding(&g, 1024, 768, 1024); /* as many ids as rows */
    test_embedding(&g, 17, 5, 3);
    return gh_finish(&g);
}
