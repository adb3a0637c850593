/* GPT-2 (pre-LN, tanh GELU, tied head) forward, backward and AdamW through kernels.h,
 * llm.c style: one flat parameter buffer, one flat gradient buffer, activations kept for
 * backward. Dropout is off (p = 0), as in the PyTorch peer. */
#include "gpt_step.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"

typedef struct layer_params {
    float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcpw, *fcpb;
} layer_params;

typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *res2, *ln2, *ln2_mean, *ln2_rstd,
        *fch, *fch_gelu, *res3;
} layer_acts;

struct gpt_step {
    gpt_step_cfg cfg;
    size_t nparams;
    float *params, *grads, *m, *v;
    float *wte, *wpe, *lnfw, *lnfb, *dwte, *dwpe, *dlnfw, *dlnfb;
    layer_params *lp, *lg; /* parameters and their gradients, per layer */
    layer_acts *la;
    float *acts, *x0, *lnf, *lnf_mean, *lnf_rstd, *logits, *losses, *tmp;
    /* backward scratch */
    float *dres, *dtmp, *dbig, *dbig2, *dqkv, *datt;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Carves n floats off *cursor. */
static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

static void layout_layer(layer_params *p, float **cur, size_t C) {
    p->ln1w = take(cur, C), p->ln1b = take(cur, C);
    p->qkvw = take(cur, 3 * C * C), p->qkvb = take(cur, 3 * C);
    p->projw = take(cur, C * C), p->projb = take(cur, C);
    p->ln2w = take(cur, C), p->ln2b = take(cur, C);
    p->fcw = take(cur, 4 * C * C), p->fcb = take(cur, 4 * C);
    p->fcpw = take(cur, 4 * C * C), p->fcpb = take(cur, C);
}

static size_t param_count(gpt_step_cfg c) {
    size_t C = c.C;
    return (size_t)c.V * C + (size_t)c.maxT * C + (size_t)c.L * (12 * C * C + 13 * C) + 2 * C;
}

static void init_params(gpt_step *g) {
    uint32_t s = 1;
    for (size_t i = 0; i < g->nparams; i++) { /* uniform with std 0.02 */
        s = s * 1664525u + 1013904223u;
        g->params[i] = 0.0693f * ((float)(s >> 8) / 16777216.0f - 0.5f);
    }
    size_t C = g->cfg.C;
    for (int l = 0; l < g->cfg.L; l++)
        for (size_t i = 0; i < C; i++) g->lp[l].ln1w[i] = g->lp[l].ln2w[i] = 1.0f;
    for (size_t i = 0; i < C; i++) g->lnfw[i] = 1.0f, g->lnfb[i] = 0.0f;
}

gpt_step *gpt_step_new(gpt_step_cfg cfg) {
    gpt_step *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->cfg = cfg;
    size_t C = cfg.C, N = (size_t)cfg.B * cfg.T, L = cfg.L;
    size_t att = (size_t)cfg.B * cfg.NH * cfg.T * cfg.T;
    g->nparams = param_count(cfg);
    g->params = calloc(g->nparams, sizeof(float));
    g->grads = calloc(g->nparams, sizeof(float));
    g->m = calloc(g->nparams, sizeof(float));
    g->v = calloc(g->nparams, sizeof(float));
    g->lp = calloc(L, sizeof *g->lp);
    g->lg = calloc(L, sizeof *g->lg);
    g->la = calloc(L, sizeof *g->la);
    size_t per_layer = N * C * 16 + N * 4 + att;
    size_t nacts = L * per_layer + N * C * 3 + N * 2 + N * (size_t)cfg.V + N;
    g->acts = calloc(nacts, sizeof(float));
    size_t nscratch = N * C * 2 + N * 4 * C * 2 + N * 3 * C + att;
    g->dres = calloc(nscratch, sizeof(float));
    if (!g->params || !g->grads || !g->m || !g->v || !g->lp || !g->lg || !g->la || !g->acts ||
        !g->dres) {
        gpt_step_free(g);
        return NULL;
    }
    float *pc = g->params, *gc = g->grads;
    g->wte = take(&pc, cfg.V * C), g->dwte = take(&gc, cfg.V * C);
    g->wpe = take(&pc, cfg.maxT * C), g->dwpe = take(&gc, cfg.maxT * C);
    for (size_t l = 0; l < L; l++) layout_layer(&g->lp[l], &pc, C), layout_layer(&g->lg[l], &gc, C);
    g->lnfw = take(&pc, C), g->lnfb = take(&pc, C);
    g->dlnfw = take(&gc, C), g->dlnfb = take(&gc, C);
    float *ac = g->acts;
    for (size_t l = 0; l < L; l++) {
        layer_acts *a = &g->la[l];
        a->ln1 = take(&ac, N * C), a->ln1_mean = take(&ac, N), a->ln1_rstd = take(&ac, N);
        a->qkv = take(&ac, 3 * N * C), a->atty = take(&ac, N * C), a->att = take(&ac, att);
        a->res2 = take(&ac, N * C), a->ln2 = take(&ac, N * C);
        a->ln2_mean = take(&ac, N), a->ln2_rstd = take(&ac, N);
        a->fch = take(&ac, 4 * N * C), a->fch_gelu = take(&ac, 4 * N * C);
        a->res3 = take(&ac, N * C);
    }
    g->x0 = take(&ac, N * C), g->lnf = take(&ac, N * C), g->tmp = take(&ac, N * C);
    g->lnf_mean = take(&ac, N), g->lnf_rstd = take(&ac, N);
    g->logits = take(&ac, N * cfg.V), g->losses = take(&ac, N);
    float *sc = g->dres;
    g->dres = take(&sc, N * C), g->dtmp = take(&sc, N * C);
    g->dbig = take(&sc, 4 * N * C), g->dbig2 = take(&sc, 4 * N * C);
    g->dqkv = take(&sc, 3 * N * C), g->datt = take(&sc, att);
    init_params(g);
    return g;
}

void gpt_step_free(gpt_step *g) {
    if (!g) return;
    free(g->params), free(g->grads), free(g->m), free(g->v), free(g->lp), free(g->lg);
    free(g->la), free(g->acts), free(g->dres);
    free(g);
}

size_t gpt_step_params(const gpt_step *g) { return g->nparams; }

static void forward(gpt_step *g, const int32_t *ids) {
    gpt_step_cfg c = g->cfg;
    int N = c.B * c.T, C = c.C;
    size_t NC = (size_t)N * C;
    ds_embedding_forward(g->x0, ids, g->wte, N, C);
    for (int b = 0; b < c.B; b++) /* + position embeddings */
        ds_accumulate(g->x0 + (size_t)b * c.T * C, g->wpe, (size_t)c.T * C);
    const float *x = g->x0;
    for (int l = 0; l < c.L; l++) {
        layer_params *p = &g->lp[l];
        layer_acts *a = &g->la[l];
        ds_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, p->ln1w, p->ln1b, N, C, 1e-5f);
        ds_matmul_forward(a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C);
        ds_attention_forward(a->atty, a->att, a->qkv, c.B, c.T, C, c.NH);
        ds_matmul_forward(g->tmp, a->atty, p->projw, p->projb, N, C, C);
        ds_add_forward(a->res2, x, g->tmp, NC);
        ds_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p->ln2w, p->ln2b, N, C,
                             1e-5f);
        ds_matmul_forward(a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C);
        ds_gelu_forward(a->fch_gelu, a->fch, 4 * NC);
        ds_matmul_forward(g->tmp, a->fch_gelu, p->fcpw, p->fcpb, N, 4 * C, C);
        ds_add_forward(a->res3, a->res2, g->tmp, NC);
        x = a->res3;
    }
    ds_layernorm_forward(g->lnf, g->lnf_mean, g->lnf_rstd, x, g->lnfw, g->lnfb, N, C, 1e-5f);
    ds_matmul_forward(g->logits, g->lnf, g->wte, NULL, N, C, c.V);
}

static void backward(gpt_step *g, const int32_t *ids) {
    gpt_step_cfg c = g->cfg;
    int N = c.B * c.T, C = c.C;
    size_t NC = (size_t)N * C;
    /* the head: dlogits overwrite the logits */
    const float *xL = c.L ? g->la[c.L - 1].res3 : g->x0;
    memset(g->dtmp, 0, NC * sizeof(float));
    ds_matmul_backward(g->dtmp, 1, g->dwte, NULL, g->logits, g->lnf, g->wte, N, C, c.V);
    memset(g->dres, 0, NC * sizeof(float));
    ds_layernorm_backward(g->dres, 1, g->dlnfw, g->dlnfb, g->dtmp, xL, g->lnfw, g->lnf_mean,
                          g->lnf_rstd, N, C);
    for (int l = c.L - 1; l >= 0; l--) {
        layer_params *p = &g->lp[l], *dp = &g->lg[l];
        layer_acts *a = &g->la[l];
        const float *x = l ? g->la[l - 1].res3 : g->x0;
        /* MLP branch: dres is d(res3), also d(res2) through the residual */
        memset(g->dbig, 0, 4 * NC * sizeof(float));
        ds_matmul_backward(g->dbig, 1, dp->fcpw, dp->fcpb, g->dres, a->fch_gelu, p->fcpw, N, 4 * C,
                           C);
        memset(g->dbig2, 0, 4 * NC * sizeof(float));
        ds_gelu_backward(g->dbig2, 1, a->fch, g->dbig, 4 * NC);
        memset(g->dtmp, 0, NC * sizeof(float));
        ds_matmul_backward(g->dtmp, 1, dp->fcw, dp->fcb, g->dbig2, a->ln2, p->fcw, N, C, 4 * C);
        ds_layernorm_backward(g->dres, 1, dp->ln2w, dp->ln2b, g->dtmp, a->res2, p->ln2w,
                              a->ln2_mean, a->ln2_rstd, N, C);
        /* attention branch */
        memset(g->dtmp, 0, NC * sizeof(float));
        ds_matmul_backward(g->dtmp, 1, dp->projw, dp->projb, g->dres, a->atty, p->projw, N, C, C);
        memset(g->dqkv, 0, 3 * NC * sizeof(float));
        ds_attention_backward(g->dqkv, 1, g->datt, g->dtmp, a->qkv, a->att, c.B, c.T, C, c.NH);
        memset(g->dtmp, 0, NC * sizeof(float));
        ds_matmul_backward(g->dtmp, 1, dp->qkvw, dp->qkvb, g->dqkv, a->ln1, p->qkvw, N, C, 3 * C);
        ds_layernorm_backward(g->dres, 1, dp->ln1w, dp->ln1b, g->dtmp, x, p->ln1w, a->ln1_mean,
                              a->ln1_rstd, N, C);
    }
    ds_embedding_backward(g->dwte, g->dres, ids, N, C);
    for (int b = 0; b < c.B; b++)
        ds_accumulate(g->dwpe, g->dres + (size_t)b * c.T * C, (size_t)c.T * C);
}

double gpt_step_run(gpt_step *g, const int32_t *ids, const int32_t *targets, int step,
                    double times_ms[4]) {
    gpt_step_cfg c = g->cfg;
    int N = c.B * c.T;
    double t0 = now_ms();
    memset(g->grads, 0, g->nparams * sizeof(float));
    double t1 = now_ms();
    forward(g, ids);
    double loss = ds_crossentropy_forward_backward(g->losses, g->logits, g->logits, targets,
                                                   1.0f / N, N, c.V) / N;
    double t2 = now_ms();
    backward(g, ids);
    double t3 = now_ms();
    double norm = sqrt(ds_sumsq(g->grads, g->nparams));
    float clip = norm > 1.0 ? (float)(1.0 / norm) : 1.0f;
    ds_adamw_update_scaled(g->params, g->grads, clip, g->m, g->v, g->nparams, 3e-4f, 0.9f,
                           0.95f, 1e-8f, 0.1f, step);
    double t4 = now_ms();
    if (times_ms) {
        times_ms[0] = t2 - t1;
        times_ms[1] = t3 - t2;
        times_ms[2] = t4 - t3;
        times_ms[3] = t1 - t0;
    }
    return loss;
}
