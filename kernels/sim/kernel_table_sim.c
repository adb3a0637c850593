/* The simulator's kernel table: every entry queues its twin in ds_cpu_kernels on the
 * compute stream, its pointers moved to the alias the stream's thread can address.
 * Before queuing, each pointer is checked: in the device's region (a host pointer passed
 * by mistake is the usual failure), in a live allocation, and, where the arguments say
 * how much the kernel touches, not past the allocation's end. A launch that fails a
 * check is queued as its error instead, so the next call that waits reports it, naming
 * the kernel and the argument.
 *
 * Same bits as on the host: the CPU kernels' reductions are fixed for a given OpenMP
 * thread count, so each launch carries the host's ds_kernels_threads() and the stream's
 * thread runs the kernel's OpenMP team with that many threads. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "sim.h"

#define MUL(a, b) ((size_t)(a) * (size_t)(b))
#define F32(n) ((size_t)(n) * sizeof(float))
#define I32(n) ((size_t)(n) * sizeof(int32_t))
#define U16(n) ((size_t)(n) * sizeof(uint16_t))
#define F64(n) ((size_t)(n) * sizeof(double))
#define EXTENT_UNKNOWN 0 /* only the start is checked (an embedding table's rows) */

/* A pointer argument: its name for messages, the bytes the kernel may touch from it. */
typedef struct sim_arg {
    const char *name;
    const void *p;
    size_t bytes;
    int optional; /* NULL allowed (kernels.h: "may be NULL") */
} sim_arg;

#define ARG(x, bytes) {#x, (x), (bytes), 0}
#define OPT(x, bytes) {#x, (x), (bytes), 1}
#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A queued launch: the CPU kernel's arguments, pointers already translated, in p[]. */
typedef struct launch {
    sim_work w;
    void (*call)(const struct launch *L);
    int threads;
    void *p[9];
    size_t n;
    int i[7];
    float f[7];
    ds_rng_key key;
    ds_half h;
    int acc; /* a backward's input gradient: 1 added to, 0 written */
} launch;

static int run_launch(sim_work *w, sim_stream *s, ds_err *err) {
    (void)err;
    launch *L = (launch *)w;
    if (s->omp_threads != L->threads) {
        omp_set_num_threads(L->threads);
        s->omp_threads = L->threads;
    }
    L->call(L);
    return 0;
}

static void submit(const launch *L, const char *kernel, const sim_arg *a, int nargs) {
    sim_dev *g = sim_current();
    if (!g) { /* only reachable through a table kept past the device's close */
        fprintf(stderr, "device sim: kernel %s launched with no sim device open\n", kernel);
        abort();
    }
    char why[256], msg[512];
    launch *q = malloc(sizeof *q);
    if (!q) {
        sim_fail(g, "kernel %s: out of host memory to queue it", kernel);
        return;
    }
    *q = *L;
    for (int k = 0; k < nargs; k++) {
        q->p[k] = NULL;
        if (!a[k].p && a[k].optional) continue;
        if (!a[k].p) snprintf(why, sizeof why, "NULL");
        else q->p[k] = sim_translate(g, a[k].p, a[k].bytes, why, sizeof why);
        if (!q->p[k]) {
            snprintf(msg, sizeof msg, "kernel %s: argument %s: %s", kernel, a[k].name, why);
            free(q);
            sim_enqueue_error(g->compute, msg);
            return;
        }
    }
    q->w.run = run_launch;
    q->w.always = 0;
    q->threads = ds_kernels_threads();
    sim_enqueue(g->compute, &q->w);
}

#define CPU ds_cpu_kernels

/* ---- dense ------------------------------------------------------------------------ */

static void k_matmul_forward(const launch *L) {
    CPU.matmul_forward(L->p[0], L->p[1], L->p[2], L->p[3], L->i[0], L->i[1], L->i[2]);
}
static void sim_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                               int N, int C, int OC) {
    launch L = {.call = k_matmul_forward, .i = {N, C, OC}};
    sim_arg args[] = {ARG(out, F32(MUL(N, OC))), ARG(inp, F32(MUL(N, C))),
                      ARG(weight, F32(MUL(OC, C))), OPT(bias, F32(OC))};
    submit(&L, "matmul_forward", args, NARGS(args));
}

static void k_matmul_backward(const launch *L) {
    CPU.matmul_backward(L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->p[5], L->i[0],
                        L->i[1], L->i[2]);
}
static void sim_matmul_backward(float *dinp, int acc, float *dweight, float *dbias,
                                const float *dout, const float *inp, const float *weight, int N,
                                int C, int OC) {
    launch L = {.call = k_matmul_backward, .i = {N, C, OC}, .acc = acc};
    /* inp is read only for dweight, weight only for dinp */
    sim_arg args[] = {OPT(dinp, F32(MUL(N, C))), OPT(dweight, F32(MUL(OC, C))),
                      OPT(dbias, F32(OC)),       ARG(dout, F32(MUL(N, OC))),
                      OPT(inp, F32(MUL(N, C))),  OPT(weight, F32(MUL(OC, C)))};
    submit(&L, "matmul_backward", args, NARGS(args));
}

/* the workspace is the CPU's (sim runs its kernels): checked to its full extent */
#define WS16(bwd) \
    ds_matmul16_workspace(DS_GEMM16_F32, (bwd), (size_t)N, (size_t)C, (size_t)OC, io16)
/* an activation's bytes: 16-bit or fp32 as io16's flag says */
#define ACT(flag, n) ((io16 & (flag)) ? U16(n) : F32(n))

static void k_matmul16_forward(const launch *L) {
    CPU.matmul16_forward(L->h, L->p[0], L->p[1], L->i[3], L->p[2], L->p[3], L->i[0], L->i[1],
                         L->i[2], L->p[4]);
}
static void sim_matmul16_forward(ds_half h, void *out, const void *inp, int io16,
                                 const uint16_t *weight, const uint16_t *bias, int N, int C,
                                 int OC, void *ws) {
    launch L = {.call = k_matmul16_forward, .i = {N, C, OC, io16}, .h = h};
    sim_arg args[] = {ARG(out, ACT(DS_MM16_OUT, MUL(N, OC))),
                      ARG(inp, ACT(DS_MM16_IN, MUL(N, C))),
                      ARG(weight, U16(MUL(OC, C))), OPT(bias, U16(OC)),
                      ARG(ws, WS16(0))};
    submit(&L, "matmul16_forward", args, NARGS(args));
}

static void k_matmul16_backward(const launch *L) {
    CPU.matmul16_backward(L->h, L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->i[3],
                          L->p[5], L->i[0], L->i[1], L->i[2], L->p[6]);
}
static void sim_matmul16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                  uint16_t *dbias, const void *dout, const void *inp, int io16,
                                  const uint16_t *weight, int N, int C, int OC, void *ws) {
    launch L = {.call = k_matmul16_backward, .i = {N, C, OC, io16}, .h = h, .acc = acc};
    /* inp is read only for dweight, weight only for dinp */
    sim_arg args[] = {OPT(dinp, F32(MUL(N, C))),
                      OPT(dweight, U16(MUL(OC, C))),
                      OPT(dbias, U16(OC)),
                      ARG(dout, ACT(DS_MM16_OUT, MUL(N, OC))),
                      OPT(inp, ACT(DS_MM16_IN, MUL(N, C))),
                      OPT(weight, U16(MUL(OC, C))),
                      ARG(ws, WS16(1))};
    submit(&L, "matmul16_backward", args, NARGS(args));
}

/* ---- embeddings and LayerNorm with 16-bit parameters ------------------------------ */

/* the bytes of n activations, 16-bit (is16) or fp32 */
#define ACT16(is16, n) ((is16) ? U16(n) : F32(n))

static void k_embedding16_forward(const launch *L) {
    CPU.embedding16_forward(L->h, L->p[0], L->p[1], L->p[2], L->i[0], L->i[1]);
}
static void sim_embedding16_forward(ds_half h, float *out, const int32_t *ids,
                                    const uint16_t *table, int N, int C) {
    launch L = {.call = k_embedding16_forward, .i = {N, C}, .h = h};
    sim_arg args[] = {ARG(out, F32(MUL(N, C))), ARG(ids, I32(N)), ARG(table, EXTENT_UNKNOWN)};
    submit(&L, "embedding16_forward", args, NARGS(args));
}

static void k_embedding16_backward(const launch *L) {
    CPU.embedding16_backward(L->h, L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->p[3]);
}
static void sim_embedding16_backward(ds_half h, uint16_t *dtable, const float *dout,
                                     const int32_t *ids, int N, int C, void *ws) {
    launch L = {.call = k_embedding16_backward, .i = {N, C}, .h = h};
    sim_arg args[] = {ARG(dtable, EXTENT_UNKNOWN), ARG(dout, F32(MUL(N, C))), ARG(ids, I32(N)),
                      ARG(ws, ds_embedding16_workspace((size_t)N, (size_t)C))};
    submit(&L, "embedding16_backward", args, NARGS(args));
}

static void k_posemb16_forward(const launch *L) {
    CPU.posemb16_forward(L->h, L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->i[2]);
}
static void sim_posemb16_forward(ds_half h, float *out, const float *inp, const uint16_t *table,
                                 int B, int T, int C) {
    launch L = {.call = k_posemb16_forward, .i = {B, T, C}, .h = h};
    sim_arg args[] = {ARG(out, F32(MUL(B, T) * C)), ARG(inp, F32(MUL(B, T) * C)),
                      ARG(table, U16(MUL(T, C)))};
    submit(&L, "posemb16_forward", args, NARGS(args));
}

static void k_posemb16_backward(const launch *L) {
    CPU.posemb16_backward(L->h, L->p[0], L->p[1], L->i[0], L->i[1], L->i[2]);
}
static void sim_posemb16_backward(ds_half h, uint16_t *dtable, const float *dout, int B, int T,
                                  int C) {
    launch L = {.call = k_posemb16_backward, .i = {B, T, C}, .h = h};
    sim_arg args[] = {ARG(dtable, U16(MUL(T, C))), ARG(dout, F32(MUL(B, T) * C))};
    submit(&L, "posemb16_backward", args, NARGS(args));
}

static void k_layernorm16_forward(const launch *L) {
    CPU.layernorm16_forward(L->h, L->p[0], L->p[1], L->p[2], L->p[3], L->p[4], L->p[5], L->i[0],
                            L->i[1], L->f[0], L->i[2], L->p[6]);
}
static void sim_layernorm16_forward(ds_half h, void *out, float *mean, float *rstd,
                                    const float *inp, const uint16_t *weight,
                                    const uint16_t *bias, int N, int C, float eps, int out16,
                                    void *ws) {
    launch L = {.call = k_layernorm16_forward, .i = {N, C, out16}, .f = {eps}, .h = h};
    sim_arg args[] = {ARG(out, ACT16(out16, MUL(N, C))), OPT(mean, F32(N)),
                      OPT(rstd, F32(N)),         ARG(inp, F32(MUL(N, C))),
                      ARG(weight, U16(C)),       ARG(bias, U16(C)),
                      ARG(ws, ds_layernorm16_workspace(0, (size_t)C))};
    submit(&L, "layernorm16_forward", args, NARGS(args));
}

static void k_layernorm16_backward(const launch *L) {
    CPU.layernorm16_backward(L->h, L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->p[5],
                             L->p[6], L->p[7], L->i[0], L->i[1], L->p[8]);
}
static void sim_layernorm16_backward(ds_half h, float *dinp, int acc, uint16_t *dweight,
                                     uint16_t *dbias, const float *dout, const float *inp,
                                     const uint16_t *weight, const float *mean, const float *rstd,
                                     int N, int C, void *ws) {
    launch L = {.call = k_layernorm16_backward, .i = {N, C}, .h = h, .acc = acc};
    sim_arg args[] = {OPT(dinp, F32(MUL(N, C))), OPT(dweight, U16(C)),
                      OPT(dbias, U16(C)),         ARG(dout, F32(MUL(N, C))),
                      ARG(inp, F32(MUL(N, C))),   ARG(weight, U16(C)),
                      ARG(mean, F32(N)),          ARG(rstd, F32(N)),
                      ARG(ws, ds_layernorm16_workspace(1, (size_t)C))};
    submit(&L, "layernorm16_backward", args, NARGS(args));
}

/* ---- elementwise ------------------------------------------------------------------ */

static void k_add_forward(const launch *L) { CPU.add_forward(L->p[0], L->p[1], L->p[2], L->n); }
static void sim_add_forward(float *out, const float *a, const float *b, size_t n) {
    launch L = {.call = k_add_forward, .n = n};
    sim_arg args[] = {ARG(out, F32(n)), ARG(a, F32(n)), ARG(b, F32(n))};
    submit(&L, "add_forward", args, NARGS(args));
}

static void k_accumulate(const launch *L) { CPU.accumulate(L->p[0], L->p[1], L->n); }
static void sim_accumulate(float *dst, const float *src, size_t n) {
    launch L = {.call = k_accumulate, .n = n};
    sim_arg args[] = {ARG(dst, F32(n)), ARG(src, F32(n))};
    submit(&L, "accumulate", args, NARGS(args));
}

static void k_scale(const launch *L) { CPU.scale(L->p[0], L->f[0], L->n); }
static void sim_scale(float *x, float s, size_t n) {
    launch L = {.call = k_scale, .n = n, .f = {s}};
    sim_arg args[] = {ARG(x, F32(n))};
    submit(&L, "scale", args, NARGS(args));
}

static void k_gelu_forward(const launch *L) { CPU.gelu_forward(L->p[0], L->p[1], L->n); }
static void sim_gelu_forward(float *out, const float *inp, size_t n) {
    launch L = {.call = k_gelu_forward, .n = n};
    sim_arg args[] = {ARG(out, F32(n)), ARG(inp, F32(n))};
    submit(&L, "gelu_forward", args, NARGS(args));
}

static void k_gelu_backward(const launch *L) {
    CPU.gelu_backward(L->p[0], L->acc, L->p[1], L->p[2], L->n);
}
static void sim_gelu_backward(float *dinp, int acc, const float *inp, const float *dout, size_t n) {
    launch L = {.call = k_gelu_backward, .n = n, .acc = acc};
    sim_arg args[] = {ARG(dinp, F32(n)), ARG(inp, F32(n)), ARG(dout, F32(n))};
    submit(&L, "gelu_backward", args, NARGS(args));
}

static void k_gelu16_forward(const launch *L) {
    CPU.gelu16_forward(L->h, L->p[0], L->p[1], L->n, L->i[0], L->i[1]);
}
static void sim_gelu16_forward(ds_half h, void *out, const void *inp, size_t n, int in16,
                               int out16) {
    launch L = {.call = k_gelu16_forward, .n = n, .i = {in16, out16}, .h = h};
    sim_arg args[] = {ARG(out, ACT16(out16, n)), ARG(inp, ACT16(in16, n))};
    submit(&L, "gelu16_forward", args, NARGS(args));
}

static void k_gelu16_backward(const launch *L) {
    CPU.gelu16_backward(L->h, L->p[0], L->acc, L->p[1], L->p[2], L->n, L->i[0]);
}
static void sim_gelu16_backward(ds_half h, void *dinp, int acc, const uint16_t *inp,
                                const float *dout, size_t n, int din16) {
    launch L = {.call = k_gelu16_backward, .n = n, .i = {din16}, .h = h, .acc = acc};
    sim_arg args[] = {ARG(dinp, ACT16(din16, n)), ARG(inp, U16(n)), ARG(dout, F32(n))};
    submit(&L, "gelu16_backward", args, NARGS(args));
}

/* ---- normalisation ---------------------------------------------------------------- */

static void k_layernorm_forward(const launch *L) {
    CPU.layernorm_forward(L->p[0], L->p[1], L->p[2], L->p[3], L->p[4], L->p[5], L->i[0], L->i[1],
                          L->f[0]);
}
static void sim_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                  const float *weight, const float *bias, int N, int C, float eps) {
    launch L = {.call = k_layernorm_forward, .i = {N, C}, .f = {eps}};
    sim_arg args[] = {ARG(out, F32(MUL(N, C))), OPT(mean, F32(N)),   OPT(rstd, F32(N)),
                      ARG(inp, F32(MUL(N, C))), OPT(weight, F32(C)), OPT(bias, F32(C))};
    submit(&L, "layernorm_forward", args, NARGS(args));
}

static void k_layernorm_backward(const launch *L) {
    CPU.layernorm_backward(L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->p[5], L->p[6],
                           L->p[7], L->i[0], L->i[1]);
}
static void sim_layernorm_backward(float *dinp, int acc, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight,
                                   const float *mean, const float *rstd, int N, int C) {
    launch L = {.call = k_layernorm_backward, .i = {N, C}, .acc = acc};
    sim_arg args[] = {OPT(dinp, F32(MUL(N, C))), OPT(dweight, F32(C)),     OPT(dbias, F32(C)),
                      ARG(dout, F32(MUL(N, C))), ARG(inp, F32(MUL(N, C))), OPT(weight, F32(C)),
                      ARG(mean, F32(N)),         ARG(rstd, F32(N))};
    submit(&L, "layernorm_backward", args, NARGS(args));
}

/* ---- embedding -------------------------------------------------------------------- */

static void k_embedding_forward(const launch *L) {
    CPU.embedding_forward(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1]);
}
static void sim_embedding_forward(float *out, const int32_t *ids, const float *table, int N,
                                  int C) {
    launch L = {.call = k_embedding_forward, .i = {N, C}};
    sim_arg args[] = {ARG(out, F32(MUL(N, C))), ARG(ids, I32(N)), ARG(table, EXTENT_UNKNOWN)};
    submit(&L, "embedding_forward", args, NARGS(args));
}

static void k_embedding_backward(const launch *L) {
    CPU.embedding_backward(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1]);
}
static void sim_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N,
                                   int C) {
    launch L = {.call = k_embedding_backward, .i = {N, C}};
    sim_arg args[] = {ARG(dtable, EXTENT_UNKNOWN), ARG(dout, F32(MUL(N, C))), ARG(ids, I32(N))};
    submit(&L, "embedding_backward", args, NARGS(args));
}

/* ---- attention -------------------------------------------------------------------- */

#define ATT_ELEMS(B, NH, T) ((size_t)(B) * (size_t)(NH) * (size_t)(T) * (size_t)(T))
#define TOKENS(B, T) ((size_t)(B) * (size_t)(T))

static void k_attention_forward(const launch *L) {
    CPU.attention_forward(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->i[2], L->i[3]);
}
static void sim_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH) {
    launch L = {.call = k_attention_forward, .i = {B, T, C, NH}};
    sim_arg args[] = {ARG(out, F32(TOKENS(B, T) * C)), ARG(att, F32(ATT_ELEMS(B, NH, T))),
                      ARG(qkv, F32(TOKENS(B, T) * 3 * C))};
    submit(&L, "attention_forward", args, NARGS(args));
}

static void k_attention_backward(const launch *L) {
    CPU.attention_backward(L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->i[0], L->i[1],
                           L->i[2], L->i[3]);
}
static void sim_attention_backward(float *dqkv, int acc, float *scratch, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C,
                                   int NH) {
    launch L = {.call = k_attention_backward, .i = {B, T, C, NH}, .acc = acc};
    sim_arg args[] = {ARG(dqkv, F32(TOKENS(B, T) * 3 * C)), ARG(scratch, F32(ATT_ELEMS(B, NH, T))),
                      ARG(dout, F32(TOKENS(B, T) * C)), ARG(qkv, F32(TOKENS(B, T) * 3 * C)),
                      ARG(att, F32(ATT_ELEMS(B, NH, T)))};
    submit(&L, "attention_backward", args, NARGS(args));
}

static void k_attention_forward_dropout(const launch *L) {
    CPU.attention_forward_dropout(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->i[2], L->i[3],
                                  L->f[0], L->key);
}
static void sim_attention_forward_dropout(float *out, float *att, const float *qkv, int B, int T,
                                          int C, int NH, float p, ds_rng_key key) {
    launch L = {.call = k_attention_forward_dropout, .i = {B, T, C, NH}, .f = {p}, .key = key};
    sim_arg args[] = {ARG(out, F32(TOKENS(B, T) * C)), ARG(att, F32(ATT_ELEMS(B, NH, T))),
                      ARG(qkv, F32(TOKENS(B, T) * 3 * C))};
    submit(&L, "attention_forward_dropout", args, NARGS(args));
}

static void k_attention_backward_dropout(const launch *L) {
    CPU.attention_backward_dropout(L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->i[0],
                                   L->i[1], L->i[2], L->i[3], L->f[0], L->key);
}
static void sim_attention_backward_dropout(float *dqkv, int acc, float *scratch, const float *dout,
                                           const float *qkv, const float *att, int B, int T, int C,
                                           int NH, float p, ds_rng_key key) {
    launch L = {
        .call = k_attention_backward_dropout, .i = {B, T, C, NH}, .f = {p}, .key = key, .acc = acc};
    sim_arg args[] = {ARG(dqkv, F32(TOKENS(B, T) * 3 * C)), ARG(scratch, F32(ATT_ELEMS(B, NH, T))),
                      ARG(dout, F32(TOKENS(B, T) * C)), ARG(qkv, F32(TOKENS(B, T) * 3 * C)),
                      ARG(att, F32(ATT_ELEMS(B, NH, T)))};
    submit(&L, "attention_backward_dropout", args, NARGS(args));
}

#define ROWS(B, NH, T) ((size_t)(B) * (size_t)(NH) * (size_t)(T))

static void k_attention_forward_fused(const launch *L) {
    CPU.attention_forward_fused(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->i[2], L->i[3],
                                L->f[0], L->key);
}
static void sim_attention_forward_fused(float *out, float *lse, const float *qkv, int B, int T,
                                        int C, int NH, float p, ds_rng_key key) {
    launch L = {.call = k_attention_forward_fused, .i = {B, T, C, NH}, .f = {p}, .key = key};
    sim_arg args[] = {ARG(out, F32(TOKENS(B, T) * C)), ARG(lse, F32(ROWS(B, NH, T))),
                      ARG(qkv, F32(TOKENS(B, T) * 3 * C))};
    submit(&L, "attention_forward_fused", args, NARGS(args));
}

static void k_attention_backward_fused(const launch *L) {
    CPU.attention_backward_fused(L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4], L->p[5],
                                 L->i[0], L->i[1], L->i[2], L->i[3], L->f[0], L->key);
}
/* scratch and out are checked although the CPU kernel reads neither: the cuda table's
 * kernel needs both, so an engine that passes a bad one fails here first */
static void sim_attention_backward_fused(float *dqkv, int acc, float *scratch, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         int B, int T, int C, int NH, float p, ds_rng_key key) {
    launch L = {.call = k_attention_backward_fused,
                .i = {B, T, C, NH},
                .f = {p},
                .key = key,
                .acc = acc};
    sim_arg args[] = {ARG(dqkv, F32(TOKENS(B, T) * 3 * C)), ARG(scratch, F32(ROWS(B, NH, T))),
                      ARG(dout, F32(TOKENS(B, T) * C)),     ARG(qkv, F32(TOKENS(B, T) * 3 * C)),
                      ARG(out, F32(TOKENS(B, T) * C)),      ARG(lse, F32(ROWS(B, NH, T)))};
    submit(&L, "attention_backward_fused", args, NARGS(args));
}

/* the workspace is the CPU's form (sim runs its kernels): checked to its full extent, and
 * may be NULL only where that is 0 bytes */
#define WS_ARG(bytes) {"ws", ws, (bytes), (bytes) == 0}
#define WSA16(bwd, din16) \
    ds_attention16_workspace(DS_ATTN16_F32, (bwd), TOKENS(B, T), (size_t)C, in16, out16, din16)

static void k_attention16_forward_fused(const launch *L) {
    CPU.attention16_forward_fused(L->h, L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->i[2],
                                  L->i[3], L->f[0], L->key, L->i[4], L->i[5], L->p[3]);
}
static void sim_attention16_forward_fused(ds_half h, void *out, float *lse, const void *qkv,
                                          int B, int T, int C, int NH, float p, ds_rng_key key,
                                          int in16, int out16, void *ws) {
    launch L = {.call = k_attention16_forward_fused,
                .i = {B, T, C, NH, in16, out16},
                .f = {p},
                .key = key,
                .h = h};
    sim_arg args[] = {ARG(out, ACT16(out16, TOKENS(B, T) * C)), ARG(lse, F32(ROWS(B, NH, T))),
                      ARG(qkv, ACT16(in16, TOKENS(B, T) * 3 * C)), WS_ARG(WSA16(0, 0))};
    submit(&L, "attention16_forward_fused", args, NARGS(args));
}

static void k_attention16_backward_fused(const launch *L) {
    CPU.attention16_backward_fused(L->h, L->p[0], L->acc, L->p[1], L->p[2], L->p[3], L->p[4],
                                   L->p[5], L->i[0], L->i[1], L->i[2], L->i[3], L->f[0], L->key,
                                   L->i[4], L->i[5], L->i[6], L->p[6]);
}
/* scratch and out are checked as attention_backward_fused's are */
static void sim_attention16_backward_fused(ds_half h, void *dqkv, int acc, float *scratch,
                                           const float *dout, const void *qkv, const void *out,
                                           const float *lse, int B, int T, int C, int NH, float p,
                                           ds_rng_key key, int in16, int out16, int din16,
                                           void *ws) {
    launch L = {.call = k_attention16_backward_fused,
                .i = {B, T, C, NH, in16, out16, din16},
                .f = {p},
                .key = key,
                .h = h,
                .acc = acc};
    sim_arg args[] = {ARG(dqkv, ACT16(din16, TOKENS(B, T) * 3 * C)),
                      ARG(scratch, F32(ROWS(B, NH, T))),
                      ARG(dout, F32(TOKENS(B, T) * C)),
                      ARG(qkv, ACT16(in16, TOKENS(B, T) * 3 * C)),
                      ARG(out, ACT16(out16, TOKENS(B, T) * C)),
                      ARG(lse, F32(ROWS(B, NH, T))),
                      WS_ARG(WSA16(1, din16))};
    submit(&L, "attention16_backward_fused", args, NARGS(args));
}

/* ---- loss ------------------------------------------------------------------------- */

static void k_crossentropy_forward(const launch *L) {
    CPU.crossentropy_forward(L->p[0], L->p[1], L->p[2], L->i[0], L->i[1], L->p[3]);
}
static void sim_crossentropy_forward(float *losses, const float *logits, const int32_t *targets,
                                     int N, int V, double *sum) {
    launch L = {.call = k_crossentropy_forward, .i = {N, V}};
    sim_arg args[] = {ARG(losses, F32(N)), ARG(logits, F32(MUL(N, V))), ARG(targets, I32(N)),
                      ARG(sum, F64(1))};
    submit(&L, "crossentropy_forward", args, NARGS(args));
}

static void k_crossentropy_backward(const launch *L) {
    CPU.crossentropy_backward(L->p[0], L->p[1], L->p[2], L->f[0], L->i[0], L->i[1]);
}
static void sim_crossentropy_backward(float *dlogits, const float *logits, const int32_t *targets,
                                      float dloss, int N, int V) {
    launch L = {.call = k_crossentropy_backward, .i = {N, V}, .f = {dloss}};
    sim_arg args[] = {ARG(dlogits, F32(MUL(N, V))), ARG(logits, F32(MUL(N, V))),
                      ARG(targets, I32(N))};
    submit(&L, "crossentropy_backward", args, NARGS(args));
}

static void k_crossentropy_forward_backward(const launch *L) {
    CPU.crossentropy_forward_backward(L->p[0], L->p[1], L->p[2], L->p[3], L->f[0], L->i[0], L->i[1],
                                      L->p[4]);
}
static void sim_crossentropy_forward_backward(float *losses, float *dlogits, const float *logits,
                                              const int32_t *targets, float dloss, int N, int V,
                                              double *sum) {
    launch L = {.call = k_crossentropy_forward_backward, .i = {N, V}, .f = {dloss}};
    sim_arg args[] = {ARG(losses, F32(N)), ARG(dlogits, F32(MUL(N, V))),
                      ARG(logits, F32(MUL(N, V))), ARG(targets, I32(N)), ARG(sum, F64(1))};
    submit(&L, "crossentropy_forward_backward", args, NARGS(args));
}

static void k_crossentropy16(const launch *L) {
    CPU.crossentropy16(L->h, L->p[0], L->p[1], L->p[2], L->p[3], L->f[0], L->i[0], L->i[1],
                       L->p[4]);
}
static void sim_crossentropy16(ds_half h, float *losses, uint16_t *dlogits,
                               const uint16_t *logits, const int32_t *targets, float dloss, int N,
                               int V, double *sum) {
    launch L = {.call = k_crossentropy16, .i = {N, V}, .f = {dloss}, .h = h};
    sim_arg args[] = {OPT(losses, F32(N)), OPT(dlogits, U16(MUL(N, V))),
                      ARG(logits, U16(MUL(N, V))), ARG(targets, I32(N)), OPT(sum, F64(1))};
    submit(&L, "crossentropy16", args, NARGS(args));
}

/* ---- dropout ---------------------------------------------------------------------- */

static void k_dropout_forward(const launch *L) {
    CPU.dropout_forward(L->p[0], L->p[1], L->n, L->f[0], L->key);
}
static void sim_dropout_forward(float *out, const float *inp, size_t n, float p, ds_rng_key key) {
    launch L = {.call = k_dropout_forward, .n = n, .f = {p}, .key = key};
    sim_arg args[] = {ARG(out, F32(n)), ARG(inp, F32(n))};
    submit(&L, "dropout_forward", args, NARGS(args));
}

static void k_dropout_backward(const launch *L) {
    CPU.dropout_backward(L->p[0], L->acc, L->p[1], L->n, L->f[0], L->key);
}
static void sim_dropout_backward(float *dinp, int acc, const float *dout, size_t n, float p,
                                 ds_rng_key key) {
    launch L = {.call = k_dropout_backward, .n = n, .f = {p}, .key = key, .acc = acc};
    sim_arg args[] = {ARG(dinp, F32(n)), ARG(dout, F32(n))};
    submit(&L, "dropout_backward", args, NARGS(args));
}

static void k_dropout_add_forward(const launch *L) {
    CPU.dropout_add_forward(L->p[0], L->p[1], L->p[2], L->n, L->f[0], L->key);
}
static void sim_dropout_add_forward(float *out, const float *x, const float *f, size_t n, float p,
                                    ds_rng_key key) {
    launch L = {.call = k_dropout_add_forward, .n = n, .f = {p}, .key = key};
    sim_arg args[] = {ARG(out, F32(n)), ARG(x, F32(n)), ARG(f, F32(n))};
    submit(&L, "dropout_add_forward", args, NARGS(args));
}

/* ---- optimizer -------------------------------------------------------------------- */

/* f[] of the AdamW entries: lr, beta1, beta2, eps, weight_decay, grad_scale; i[0] = t */
static void k_adamw_update(const launch *L) {
    CPU.adamw_update(L->p[0], L->p[1], L->p[2], L->p[3], L->n, L->f[0], L->f[1], L->f[2], L->f[3],
                     L->f[4], L->i[0]);
}
static void sim_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                             float lr, float beta1, float beta2, float eps, float weight_decay,
                             int t) {
    launch L = {
        .call = k_adamw_update, .n = n, .i = {t}, .f = {lr, beta1, beta2, eps, weight_decay}};
    sim_arg args[] = {ARG(param, F32(n)), ARG(grad, F32(n)), ARG(m, F32(n)), ARG(v, F32(n))};
    submit(&L, "adamw_update", args, NARGS(args));
}

/* A span list is host memory the caller may reuse once the entry returns, so each span
 * is its own launch (the CPU entry on one span: what the CPU's own loop over the spans
 * computes, the same bits). */
static void k_adamw_span(const launch *L) {
    ds_decay_span sp = {0, L->n, L->f[4]};
    CPU.adamw_spans(L->p[0], L->p[1], L->f[5], L->p[2], L->p[3], &sp, 1, L->f[0], L->f[1],
                    L->f[2], L->f[3], L->i[0]);
}
static void sim_adamw_spans(float *param, const float *grad, float grad_scale, float *m,
                            float *v, const ds_decay_span *spans, int nspans, float lr,
                            float beta1, float beta2, float eps, int t) {
    for (int k = 0; k < nspans; k++) {
        size_t o = spans[k].off, n = spans[k].n;
        launch L = {.call = k_adamw_span,
                    .n = n,
                    .i = {t},
                    .f = {lr, beta1, beta2, eps, spans[k].weight_decay, grad_scale}};
        float *param_span = param + o, *m_span = m + o, *v_span = v + o;
        const float *grad_span = grad + o;
        sim_arg args[] = {ARG(param_span, F32(n)), ARG(grad_span, F32(n)), ARG(m_span, F32(n)),
                          ARG(v_span, F32(n))};
        submit(&L, "adamw_spans", args, NARGS(args));
    }
}

static void k_sgd_update(const launch *L) {
    CPU.sgd_update(L->p[0], L->p[1], L->p[2], L->n, L->f[0], L->f[1], L->f[2]);
}
static void sim_sgd_update(float *param, const float *grad, float *buf, size_t n, float lr,
                           float momentum, float weight_decay) {
    launch L = {.call = k_sgd_update, .n = n, .f = {lr, momentum, weight_decay}};
    sim_arg args[] = {ARG(param, F32(n)), ARG(grad, F32(n)), OPT(buf, F32(n))};
    submit(&L, "sgd_update", args, NARGS(args));
}

static void k_sumsq(const launch *L) { CPU.sumsq(L->p[0], L->n, L->p[1]); }
static void sim_sumsq(const float *x, size_t n, double *out) {
    launch L = {.call = k_sumsq, .n = n};
    sim_arg args[] = {ARG(x, F32(n)), ARG(out, F64(1))};
    submit(&L, "sumsq", args, NARGS(args));
}

/* ---- 16-bit working copies -------------------------------------------------------- */

static void k_half_from_f32(const launch *L) { CPU.half_from_f32(L->h, L->p[0], L->p[1], L->n); }
static void sim_half_from_f32(ds_half h, uint16_t *dst, const float *src, size_t n) {
    launch L = {.call = k_half_from_f32, .n = n, .h = h};
    sim_arg args[] = {ARG(dst, U16(n)), ARG(src, F32(n))};
    submit(&L, "half_from_f32", args, NARGS(args));
}

static void k_half_to_f32(const launch *L) { CPU.half_to_f32(L->h, L->p[0], L->p[1], L->n); }
static void sim_half_to_f32(ds_half h, float *dst, const uint16_t *src, size_t n) {
    launch L = {.call = k_half_to_f32, .n = n, .h = h};
    sim_arg args[] = {ARG(dst, F32(n)), ARG(src, U16(n))};
    submit(&L, "half_to_f32", args, NARGS(args));
}

static void k_half_acc_f32(const launch *L) { CPU.half_acc_f32(L->h, L->p[0], L->p[1], L->n); }
static void sim_half_acc_f32(ds_half h, uint16_t *acc, const float *x, size_t n) {
    launch L = {.call = k_half_acc_f32, .n = n, .h = h};
    sim_arg args[] = {ARG(acc, U16(n)), ARG(x, F32(n))};
    submit(&L, "half_acc_f32", args, NARGS(args));
}

static void k_half_add(const launch *L) { CPU.half_add(L->h, L->p[0], L->p[1], L->p[2], L->n); }
static void sim_half_add(ds_half h, uint16_t *out, const uint16_t *a, const uint16_t *b, size_t n) {
    launch L = {.call = k_half_add, .n = n, .h = h};
    sim_arg args[] = {ARG(out, U16(n)), ARG(a, U16(n)), ARG(b, U16(n))};
    submit(&L, "half_add", args, NARGS(args));
}

static void k_half_scale(const launch *L) { CPU.half_scale(L->h, L->p[0], L->f[0], L->n); }
static void sim_half_scale(ds_half h, uint16_t *x, float k, size_t n) {
    launch L = {.call = k_half_scale, .n = n, .h = h, .f = {k}};
    sim_arg args[] = {ARG(x, U16(n))};
    submit(&L, "half_scale", args, NARGS(args));
}

static void k_half_sumsq(const launch *L) { CPU.half_sumsq(L->h, L->p[0], L->n, L->p[1]); }
static void sim_half_sumsq(ds_half h, const uint16_t *x, size_t n, double *out) {
    launch L = {.call = k_half_sumsq, .n = n, .h = h};
    sim_arg args[] = {ARG(x, U16(n)), ARG(out, F64(1))};
    submit(&L, "half_sumsq", args, NARGS(args));
}

static void k_adamw_half_span(const launch *L) {
    ds_decay_span sp = {0, L->n, L->f[4]};
    CPU.adamw_half_spans(L->h, L->p[0], L->p[1], L->f[5], L->p[2], L->p[3], L->p[4], &sp, 1,
                         L->f[0], L->f[1], L->f[2], L->f[3], L->i[0]);
}
static void sim_adamw_half_spans(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                                 float *master, float *m, float *v, const ds_decay_span *spans,
                                 int nspans, float lr, float beta1, float beta2, float eps,
                                 int t) {
    for (int k = 0; k < nspans; k++) {
        size_t o = spans[k].off, n = spans[k].n;
        launch L = {.call = k_adamw_half_span,
                    .n = n,
                    .h = h,
                    .i = {t},
                    .f = {lr, beta1, beta2, eps, spans[k].weight_decay, grad_scale}};
        uint16_t *w_span = w + o;
        const uint16_t *grad_span = grad + o;
        float *master_span = master + o, *m_span = m + o, *v_span = v + o;
        sim_arg args[] = {ARG(w_span, U16(n)), ARG(grad_span, U16(n)), ARG(master_span, F32(n)),
                          ARG(m_span, F32(n)), ARG(v_span, F32(n))};
        submit(&L, "adamw_half_spans", args, NARGS(args));
    }
}

static void k_sgd_update_half(const launch *L) {
    CPU.sgd_update_half(L->h, L->p[0], L->p[1], L->f[3], L->p[2], L->p[3], L->n, L->f[0], L->f[1],
                        L->f[2]);
}
static void sim_sgd_update_half(ds_half h, uint16_t *w, const uint16_t *grad, float grad_scale,
                                float *master, float *buf, size_t n, float lr, float momentum,
                                float weight_decay) {
    launch L = {
        .call = k_sgd_update_half, .n = n, .h = h, .f = {lr, momentum, weight_decay, grad_scale}};
    sim_arg args[] = {ARG(w, U16(n)), ARG(grad, U16(n)), ARG(master, F32(n)), OPT(buf, F32(n))};
    submit(&L, "sgd_update_half", args, NARGS(args));
}

const ds_kernel_table ds_sim_kernels = {
    .matmul_forward = sim_matmul_forward,
    .matmul_backward = sim_matmul_backward,
    .matmul16_forward = sim_matmul16_forward,
    .matmul16_backward = sim_matmul16_backward,
    .add_forward = sim_add_forward,
    .accumulate = sim_accumulate,
    .scale = sim_scale,
    .gelu_forward = sim_gelu_forward,
    .gelu_backward = sim_gelu_backward,
    .gelu16_forward = sim_gelu16_forward,
    .gelu16_backward = sim_gelu16_backward,
    .layernorm_forward = sim_layernorm_forward,
    .layernorm_backward = sim_layernorm_backward,
    .embedding_forward = sim_embedding_forward,
    .embedding_backward = sim_embedding_backward,
    .embedding16_forward = sim_embedding16_forward,
    .embedding16_backward = sim_embedding16_backward,
    .posemb16_forward = sim_posemb16_forward,
    .posemb16_backward = sim_posemb16_backward,
    .layernorm16_forward = sim_layernorm16_forward,
    .layernorm16_backward = sim_layernorm16_backward,
    .attention_forward = sim_attention_forward,
    .attention_backward = sim_attention_backward,
    .attention_forward_dropout = sim_attention_forward_dropout,
    .attention_backward_dropout = sim_attention_backward_dropout,
    .attention_forward_fused = sim_attention_forward_fused,
    .attention_backward_fused = sim_attention_backward_fused,
    .attention16_forward_fused = sim_attention16_forward_fused,
    .attention16_backward_fused = sim_attention16_backward_fused,
    .crossentropy_forward = sim_crossentropy_forward,
    .crossentropy_backward = sim_crossentropy_backward,
    .crossentropy_forward_backward = sim_crossentropy_forward_backward,
    .crossentropy16 = sim_crossentropy16,
    .dropout_forward = sim_dropout_forward,
    .dropout_backward = sim_dropout_backward,
    .dropout_add_forward = sim_dropout_add_forward,
    .adamw_update = sim_adamw_update,
    .adamw_spans = sim_adamw_spans,
    .sgd_update = sim_sgd_update,
    .sumsq = sim_sumsq,
    .half_from_f32 = sim_half_from_f32,
    .half_to_f32 = sim_half_to_f32,
    .half_acc_f32 = sim_half_acc_f32,
    .half_add = sim_half_add,
    .half_scale = sim_half_scale,
    .half_sumsq = sim_half_sumsq,
    .adamw_half_spans = sim_adamw_half_spans,
    .sgd_update_half = sim_sgd_update_half,
};
