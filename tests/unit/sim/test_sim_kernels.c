/* The simulated device's kernel table against ds_cpu_kernels: every entry, on the same
 * random inputs, gives the same bits in every buffer (outputs and inputs alike), at
 * more than one OpenMP thread count; and a launch with a bad pointer (a host pointer,
 * NULL, a range past its buffer) is reported at the next sync, naming the kernel and
 * the argument, and stays reported. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "device.h"
#include "kernel_table.h"
#include "kernels_testutil.h"
#include "sim_testutil.h"

/* Shapes: small, but past the kernels' thresholds for going parallel, so the thread
 * count matters (DS_PAR_MIN elements; the GEMM splits from 4 MFLOP). */
enum { MN = 64, MC = 256, MOC = 128 };       /* matmul */
enum { HN = 8, HC = 64, HOC = DS_MATMUL16_COLS + 37 }; /* matmul16 in two chunks */
enum { EN = 300007 };                        /* elementwise, dropout, optimizer, sums */
enum { LN = 130, LC = 2050 };                /* layernorm */
enum { BN = 64, BC = 4100, BV = 50 };        /* embedding */
enum { PB = 4, PT = 64, PC = 1200 };         /* position embedding */
enum { AB = 2, AT = 64, AC = 64, ANH = 4 };  /* attention */
enum { XN = 64, XV = 5000 };                 /* cross-entropy */
#define ATT (AB * ANH * AT * AT)
#define QKV (AB * AT * 3 * AC)
#define ACT (AB * AT * AC)
#define LSE (AB * ANH * AT)

typedef enum { NONE, F32, I32, U16, F64 } btype;
typedef enum { RAND, POS, IDS, TARGETS, HALF } binit;

typedef struct buf {
    btype t;
    size_t n;
    binit init; /* RAND: U(-1,1); POS: U(0.1,1); IDS: [0,max); TARGETS: [-1,max); HALF:
                   16-bit values of U(-1,1) in the case's format */
    int max;
} buf;

typedef void (*call_fn)(const ds_kernel_table *k, void **b, ds_half h);

typedef struct kcase {
    const char *name;
    size_t slot; /* offsetof the entry in ds_kernel_table */
    ds_half h;
    call_fn call;
    buf b[9];
} kcase;

static const ds_rng_key KEY = {0x5EEDull << 20 | 77, 3, 7, 1, 12345};

#define B_F32(n) {F32, (n), RAND, 0}
#define B_POS(n) {F32, (n), POS, 0}
#define B_U16(n) {U16, (n), HALF, 0}
#define B_F64 {F64, 1, RAND, 0}
#define B_NONE {NONE, 0, RAND, 0}

static void c_matmul_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->matmul_forward(b[0], b[1], b[2], b[3], MN, MC, MOC);
}
static void c_matmul_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->matmul_backward(b[0], 1, b[1], b[2], b[3], b[4], b[5], MN, MC, MOC);
}
/* matmul16's workspace in floats (ds_matmul16_workspace for DS_GEMM16_F32: every part a
 * multiple of 256 bytes at these shapes), checked in test_every_entry_covered */
#define WS16(bwd) (MOC * MC + MN * MC + MOC + ((bwd) ? MN * MOC : 0))
/* ... and at the chunked shape, whose workspace holds one chunk (K columns) */
#define K16 DS_MATMUL16_COLS
#define WS16H(bwd) (K16 * HC + HN * HC + K16 + ((bwd) ? HN * K16 : 0))
static void c_matmul16_forward(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_forward(h, b[0], b[1], 0, b[2], b[3], MN, MC, MOC, b[4]);
}
static void c_matmul16_backward(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], 0, b[5], MN, MC, MOC, b[6]);
}
static void c_matmul16_forward_chunked(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_forward(h, b[0], b[1], 0, b[2], b[3], HN, HC, HOC, b[4]);
}
static void c_matmul16_backward_chunked(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], 0, b[5], HN, HC, HOC, b[6]);
}
/* 16-bit activations (DS_MM16_*): the input and output (gradient) both, or only the
 * output (gradient); a 16-bit forward output adds one chunk's fp32 part (WS16O) */
#define IO16 (DS_MM16_IN | DS_MM16_OUT)
#define WS16O (MN * MOC)
#define WS16HO (HN * K16)
static void c_matmul16_forward_io(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_forward(h, b[0], b[1], IO16, b[2], b[3], MN, MC, MOC, b[4]);
}
static void c_matmul16_forward_out(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_forward(h, b[0], b[1], DS_MM16_OUT, b[2], b[3], MN, MC, MOC, b[4]);
}
static void c_matmul16_backward_io(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], IO16, b[5], MN, MC, MOC, b[6]);
}
static void c_matmul16_backward_out(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], DS_MM16_OUT, b[5], MN, MC, MOC, b[6]);
}
static void c_matmul16_forward_io_chunked(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_forward(h, b[0], b[1], IO16, b[2], b[3], HN, HC, HOC, b[4]);
}
static void c_matmul16_backward_io_chunked(const ds_kernel_table *k, void **b, ds_half h) {
    k->matmul16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], IO16, b[5], HN, HC, HOC, b[6]);
}
static void c_crossentropy16(const ds_kernel_table *k, void **b, ds_half h) {
    k->crossentropy16(h, b[0], b[1], b[2], b[3], 1.0f / XN, XN, XV, b[4]);
}
static void c_crossentropy16_in_place(const ds_kernel_table *k, void **b, ds_half h) {
    k->crossentropy16(h, b[0], b[1], b[1], b[2], 1.0f / XN, XN, XV, b[3]);
}
static void c_crossentropy16_backward_in_place(const ds_kernel_table *k, void **b, ds_half h) {
    k->crossentropy16(h, NULL, b[0], b[0], b[1], 1.0f / XN, XN, XV, NULL);
}
static void c_crossentropy16_forward(const ds_kernel_table *k, void **b, ds_half h) {
    k->crossentropy16(h, b[0], NULL, b[1], b[2], 0.0f, XN, XV, b[3]);
}
static void c_add_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->add_forward(b[0], b[1], b[2], EN);
}
static void c_accumulate(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->accumulate(b[0], b[1], EN);
}
static void c_scale(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->scale(b[0], 0.37f, EN);
}
static void c_gelu_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->gelu_forward(b[0], b[1], EN);
}
static void c_gelu_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->gelu_backward(b[0], 1, b[1], b[2], EN);
}
static void c_layernorm_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->layernorm_forward(b[0], b[1], b[2], b[3], b[4], b[5], LN, LC, 1e-5f);
}
static void c_layernorm_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->layernorm_backward(b[0], 1, b[1], b[2], b[3], b[4], b[5], b[6], b[7], LN, LC);
}
static void c_embedding_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->embedding_forward(b[0], b[1], b[2], BN, BC);
}
static void c_embedding_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->embedding_backward(b[0], b[1], b[2], BN, BC);
}
/* the embedding16 and layernorm16 workspaces in floats (kernel_table.h: parts rounded to
 * 256 bytes), checked in test_every_entry_covered */
#define PART(bytes) ((((bytes) + 255) & ~255) / 4)
#define WSE (PART(8 * BN) + PART(4 * BC))
#define WSL(bwd) ((2 + (bwd)) * PART(4 * LC))
/* attention16's on the CPU: qkv widened, and in forward the fp32 output (floats) */
#define WSA(bwd) (QKV + ((bwd) ? 0 : ACT))
/* ... and backward's with a 16-bit dqkv: qkv widened, then the fp32 dqkv */
#define WSA16D (2 * QKV)
static void c_embedding16_forward(const ds_kernel_table *k, void **b, ds_half h) {
    k->embedding16_forward(h, b[0], b[1], b[2], BN, BC);
}
static void c_embedding16_backward(const ds_kernel_table *k, void **b, ds_half h) {
    k->embedding16_backward(h, b[0], b[1], b[2], BN, BC, b[3]);
}
static void c_posemb16_forward(const ds_kernel_table *k, void **b, ds_half h) {
    k->posemb16_forward(h, b[0], b[1], b[2], PB, PT, PC);
}
static void c_posemb16_backward(const ds_kernel_table *k, void **b, ds_half h) {
    k->posemb16_backward(h, b[0], b[1], PB, PT, PC);
}
static void c_layernorm16_forward(const ds_kernel_table *k, void **b, ds_half h) {
    k->layernorm16_forward(h, b[0], b[1], b[2], b[3], b[4], b[5], LN, LC, 1e-5f, 0, b[6]);
}
static void c_layernorm16_forward_out16(const ds_kernel_table *k, void **b, ds_half h) {
    k->layernorm16_forward(h, b[0], b[1], b[2], b[3], b[4], b[5], LN, LC, 1e-5f, 1, b[6]);
}
/* the 16-bit activation entries, one caller per combination of a 16-bit input (I) and
 * output (O) */
static void c_gelu16_forward_io(const ds_kernel_table *k, void **b, ds_half h) {
    k->gelu16_forward(h, b[0], b[1], EN, 1, 1);
}
static void c_gelu16_forward_i(const ds_kernel_table *k, void **b, ds_half h) {
    k->gelu16_forward(h, b[0], b[1], EN, 1, 0);
}
static void c_gelu16_forward_o(const ds_kernel_table *k, void **b, ds_half h) {
    k->gelu16_forward(h, b[0], b[1], EN, 0, 1);
}
static void c_gelu16_backward(const ds_kernel_table *k, void **b, ds_half h) {
    k->gelu16_backward(h, b[0], 1, b[1], b[2], EN, 0);
}
static void c_attention16_forward_io(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_forward_fused(h, b[0], b[1], b[2], AB, AT, AC, ANH, 0.0f, KEY, 1, 1, b[3]);
}
static void c_attention16_forward_i(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_forward_fused(h, b[0], b[1], b[2], AB, AT, AC, ANH, 0.0f, KEY, 1, 0, b[3]);
}
static void c_attention16_forward_o(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_forward_fused(h, b[0], b[1], b[2], AB, AT, AC, ANH, 0.0f, KEY, 0, 1, b[3]);
}
static void c_attention16_forward_io_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_forward_fused(h, b[0], b[1], b[2], AB, AT, AC, ANH, 0.1f, KEY, 1, 1, b[3]);
}
static void c_attention16_backward_io(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_backward_fused(h, b[0], 1, b[1], b[2], b[3], b[4], b[5], AB, AT, AC, ANH, 0.0f,
                                  KEY, 1, 1, 0, b[6]);
}
static void c_attention16_backward_o(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_backward_fused(h, b[0], 1, b[1], b[2], b[3], b[4], b[5], AB, AT, AC, ANH, 0.0f,
                                  KEY, 0, 1, 0, b[6]);
}
static void c_attention16_backward_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    k->attention16_backward_fused(h, b[0], 0, b[1], b[2], b[3], b[4], b[5], AB, AT, AC, ANH, 0.1f,
                                  KEY, 1, 1, 1, b[6]);
}
static void c_layernorm16_backward(const ds_kernel_table *k, void **b, ds_half h) {
    k->layernorm16_backward(h, b[0], 1, b[1], b[2], b[3], b[4], b[5], b[6], b[7], LN, LC, b[8]);
}
static void c_attention_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_forward(b[0], b[1], b[2], AB, AT, AC, ANH);
}
static void c_attention_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_backward(b[0], 1, b[1], b[2], b[3], b[4], AB, AT, AC, ANH);
}
static void c_attention_forward_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_forward_dropout(b[0], b[1], b[2], AB, AT, AC, ANH, 0.1f, KEY);
}
static void c_attention_backward_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_backward_dropout(b[0], 1, b[1], b[2], b[3], b[4], AB, AT, AC, ANH, 0.1f, KEY);
}
static void c_attention_forward_fused(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_forward_fused(b[0], b[1], b[2], AB, AT, AC, ANH, 0.0f, KEY);
}
static void c_attention_backward_fused(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_backward_fused(b[0], 1, b[1], b[2], b[3], b[4], b[5], AB, AT, AC, ANH, 0.0f, KEY);
}
static void c_attention_forward_fused_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_forward_fused(b[0], b[1], b[2], AB, AT, AC, ANH, 0.1f, KEY);
}
static void c_attention_backward_fused_dropout(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->attention_backward_fused(b[0], 1, b[1], b[2], b[3], b[4], b[5], AB, AT, AC, ANH, 0.1f, KEY);
}
static void c_crossentropy_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->crossentropy_forward(b[0], b[1], b[2], XN, XV, b[3]);
}
static void c_crossentropy_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->crossentropy_backward(b[0], b[1], b[2], 1.0f / XN, XN, XV);
}
static void c_crossentropy_forward_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->crossentropy_forward_backward(b[0], b[1], b[2], b[3], 1.0f / XN, XN, XV, b[4]);
}
static void c_crossentropy_in_place(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h; /* dlogits is the logits buffer */
    k->crossentropy_forward_backward(b[0], b[1], b[1], b[2], 1.0f / XN, XN, XV, b[3]);
}
static void c_crossentropy_backward_in_place(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h; /* dlogits is the logits buffer, as the criterion's backward calls it */
    k->crossentropy_backward(b[0], b[0], b[1], 1.0f / XN, XN, XV);
}
static void c_dropout_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->dropout_forward(b[0], b[1], EN, 0.2f, KEY);
}
static void c_dropout_backward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->dropout_backward(b[0], 1, b[1], EN, 0.2f, KEY);
}
static void c_dropout_add_forward(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->dropout_add_forward(b[0], b[1], b[2], EN, 0.2f, KEY);
}
static void c_adamw_update(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->adamw_update(b[0], b[1], b[2], b[3], EN, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
}
/* two spans with different decays and untouched elements around and between them */
static const ds_decay_span SPANS[] = {{3, EN / 2 - 3, 0.1f}, {EN / 2 + 7, EN / 2 - 9, 0.0f}};
static void c_adamw_spans(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->adamw_spans(b[0], b[1], 0.5f, b[2], b[3], SPANS, 2, 1e-3f, 0.9f, 0.95f, 1e-8f, 3);
}
static void c_sgd_update(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->sgd_update(b[0], b[1], b[2], EN, 0.01f, b[2] ? 0.9f : 0.0f, 0.01f);
}
static void c_sumsq(const ds_kernel_table *k, void **b, ds_half h) {
    (void)h;
    k->sumsq(b[0], EN, b[1]);
}
static void c_half_from_f32(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_from_f32(h, b[0], b[1], EN);
}
static void c_half_to_f32(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_to_f32(h, b[0], b[1], EN);
}
static void c_half_acc_f32(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_acc_f32(h, b[0], b[1], EN);
}
static void c_half_add(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_add(h, b[0], b[1], b[2], EN);
}
static void c_half_scale(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_scale(h, b[0], 0.7f, EN);
}
static void c_half_sumsq(const ds_kernel_table *k, void **b, ds_half h) {
    k->half_sumsq(h, b[0], EN, b[1]);
}
static void c_adamw_half_spans(const ds_kernel_table *k, void **b, ds_half h) {
    k->adamw_half_spans(h, b[0], b[1], 0.25f, b[2], b[3], b[4], SPANS, 2, 1e-3f, 0.9f, 0.95f,
                        1e-8f, 3);
}
static void c_sgd_update_half(const ds_kernel_table *k, void **b, ds_half h) {
    k->sgd_update_half(h, b[0], b[1], 0.25f, b[2], b[3], EN, 0.01f, b[3] ? 0.9f : 0.0f, 0.01f);
}

#define SLOT(entry) offsetof(ds_kernel_table, entry)
#define HALF_CASES(h)                                                                          \
    {"matmul16_forward", SLOT(matmul16_forward), h, c_matmul16_forward,                        \
     {B_F32(MN * MOC), B_F32(MN * MC), B_U16(MOC * MC), B_U16(MOC), B_F32(WS16(0))}},           \
    {"matmul16_forward (no bias)", SLOT(matmul16_forward), h, c_matmul16_forward,              \
     {B_F32(MN * MOC), B_F32(MN * MC), B_U16(MOC * MC), B_NONE, B_F32(WS16(0))}},               \
    {"matmul16_backward", SLOT(matmul16_backward), h, c_matmul16_backward,                     \
     {B_F32(MN * MC), B_U16(MOC * MC), B_U16(MOC), B_F32(MN * MOC), B_F32(MN * MC),             \
      B_U16(MOC * MC), B_F32(WS16(1))}},                                                        \
    {"matmul16_backward (dinp only)", SLOT(matmul16_backward), h, c_matmul16_backward,         \
     {B_F32(MN * MC), B_NONE, B_NONE, B_F32(MN * MOC), B_NONE, B_U16(MOC * MC),                 \
      B_F32(WS16(1))}},                                                                         \
    {"embedding16_forward", SLOT(embedding16_forward), h, c_embedding16_forward,               \
     {B_F32(BN * BC), {I32, BN, IDS, BV}, B_U16(BV * BC)}},                                    \
    {"embedding16_backward", SLOT(embedding16_backward), h, c_embedding16_backward,            \
     {B_U16(BV * BC), B_F32(BN * BC), {I32, BN, IDS, BV}, B_F32(WSE)}},                         \
    {"posemb16_forward", SLOT(posemb16_forward), h, c_posemb16_forward,                        \
     {B_F32(PB * PT * PC), B_F32(PB * PT * PC), B_U16(PT * PC)}},                              \
    {"posemb16_backward", SLOT(posemb16_backward), h, c_posemb16_backward,                     \
     {B_U16(PT * PC), B_F32(PB * PT * PC)}},                                                   \
    {"layernorm16_forward", SLOT(layernorm16_forward), h, c_layernorm16_forward,               \
     {B_F32(LN * LC), B_F32(LN), B_F32(LN), B_F32(LN * LC), B_U16(LC), B_U16(LC),              \
      B_F32(WSL(0))}},                                                                          \
    {"layernorm16_forward (16-bit out)", SLOT(layernorm16_forward), h,                         \
     c_layernorm16_forward_out16,                                                              \
     {B_U16(LN * LC), B_F32(LN), B_F32(LN), B_F32(LN * LC), B_U16(LC), B_U16(LC),              \
      B_F32(WSL(0))}},                                                                          \
    {"gelu16_forward", SLOT(gelu16_forward), h, c_gelu16_forward_io, {B_U16(EN), B_U16(EN)}},  \
    {"gelu16_forward (16-bit in)", SLOT(gelu16_forward), h, c_gelu16_forward_i,                \
     {B_F32(EN), B_U16(EN)}},                                                                  \
    {"gelu16_forward (16-bit out)", SLOT(gelu16_forward), h, c_gelu16_forward_o,               \
     {B_U16(EN), B_F32(EN)}},                                                                  \
    {"gelu16_backward", SLOT(gelu16_backward), h, c_gelu16_backward,                           \
     {B_F32(EN), B_U16(EN), B_F32(EN)}},                                                       \
    {"attention16_forward_fused", SLOT(attention16_forward_fused), h, c_attention16_forward_io, \
     {B_U16(ACT), B_F32(LSE), B_U16(QKV), B_F32(WSA(0))}},                                     \
    {"attention16_forward_fused (16-bit qkv)", SLOT(attention16_forward_fused), h,             \
     c_attention16_forward_i, {B_F32(ACT), B_F32(LSE), B_U16(QKV), B_F32(QKV)}},               \
    {"attention16_forward_fused (16-bit out)", SLOT(attention16_forward_fused), h,             \
     c_attention16_forward_o, {B_U16(ACT), B_F32(LSE), B_F32(QKV), B_F32(ACT)}},               \
    {"attention16_backward_fused", SLOT(attention16_backward_fused), h,                        \
     c_attention16_backward_io,                                                                \
     {B_F32(QKV), B_F32(LSE), B_F32(ACT), B_U16(QKV), B_U16(ACT), B_POS(LSE), B_F32(WSA(1))}}, \
    {"attention16_backward_fused (16-bit out: no workspace)", SLOT(attention16_backward_fused), \
     h, c_attention16_backward_o,                                                              \
     {B_F32(QKV), B_F32(LSE), B_F32(ACT), B_F32(QKV), B_U16(ACT), B_POS(LSE), B_NONE}},        \
    {"attention16_forward_fused (dropout)", SLOT(attention16_forward_fused), h,                \
     c_attention16_forward_io_dropout, {B_U16(ACT), B_F32(LSE), B_U16(QKV), B_F32(WSA(0))}},   \
    {"attention16_backward_fused (dropout, 16-bit dqkv)", SLOT(attention16_backward_fused), h, \
     c_attention16_backward_dropout,                                                           \
     {B_U16(QKV), B_F32(LSE), B_F32(ACT), B_U16(QKV), B_U16(ACT), B_POS(LSE),                  \
      B_F32(WSA16D)}},                                                                          \
    {"layernorm16_backward", SLOT(layernorm16_backward), h, c_layernorm16_backward,            \
     {B_F32(LN * LC), B_U16(LC), B_U16(LC), B_F32(LN * LC), B_F32(LN * LC), B_U16(LC),         \
      B_F32(LN), B_POS(LN), B_F32(WSL(1))}},                                                    \
    {"layernorm16_backward (dinp only)", SLOT(layernorm16_backward), h, c_layernorm16_backward, \
     {B_F32(LN * LC), B_NONE, B_NONE, B_F32(LN * LC), B_F32(LN * LC), B_U16(LC), B_F32(LN),    \
      B_POS(LN), B_F32(WSL(1))}},                                                               \
    {"matmul16_forward (chunked)", SLOT(matmul16_forward), h, c_matmul16_forward_chunked,      \
     {B_F32(HN * HOC), B_F32(HN * HC), B_U16(HOC * HC), B_U16(HOC), B_F32(WS16H(0))}},          \
    {"matmul16_backward (chunked)", SLOT(matmul16_backward), h, c_matmul16_backward_chunked,   \
     {B_F32(HN * HC), B_U16(HOC * HC), B_U16(HOC), B_F32(HN * HOC), B_F32(HN * HC),             \
      B_U16(HOC * HC), B_F32(WS16H(1))}},                                                       \
    {"matmul16_forward (16-bit in and out)", SLOT(matmul16_forward), h, c_matmul16_forward_io,  \
     {B_U16(MN * MOC), B_U16(MN * MC), B_U16(MOC * MC), B_U16(MOC), B_F32(WS16(0) + WS16O)}},   \
    {"matmul16_forward (16-bit out)", SLOT(matmul16_forward), h, c_matmul16_forward_out,       \
     {B_U16(MN * MOC), B_F32(MN * MC), B_U16(MOC * MC), B_NONE, B_F32(WS16(0) + WS16O)}},       \
    {"matmul16_backward (16-bit in and dout)", SLOT(matmul16_backward), h,                     \
     c_matmul16_backward_io,                                                                    \
     {B_F32(MN * MC), B_U16(MOC * MC), B_U16(MOC), B_U16(MN * MOC), B_U16(MN * MC),             \
      B_U16(MOC * MC), B_F32(WS16(1))}},                                                        \
    {"matmul16_backward (16-bit dout)", SLOT(matmul16_backward), h, c_matmul16_backward_out,   \
     {B_F32(MN * MC), B_U16(MOC * MC), B_U16(MOC), B_U16(MN * MOC), B_F32(MN * MC),             \
      B_U16(MOC * MC), B_F32(WS16(1))}},                                                        \
    {"matmul16_forward (16-bit, chunked)", SLOT(matmul16_forward), h,                          \
     c_matmul16_forward_io_chunked,                                                             \
     {B_U16(HN * HOC), B_U16(HN * HC), B_U16(HOC * HC), B_U16(HOC), B_F32(WS16H(0) + WS16HO)}}, \
    {"matmul16_backward (16-bit, chunked)", SLOT(matmul16_backward), h,                        \
     c_matmul16_backward_io_chunked,                                                            \
     {B_F32(HN * HC), B_U16(HOC * HC), B_U16(HOC), B_U16(HN * HOC), B_U16(HN * HC),             \
      B_U16(HOC * HC), B_F32(WS16H(1))}},                                                       \
    {"crossentropy16", SLOT(crossentropy16), h, c_crossentropy16,                              \
     {B_F32(XN), B_U16(XN * XV), B_U16(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},              \
    {"crossentropy16 (in place)", SLOT(crossentropy16), h, c_crossentropy16_in_place,          \
     {B_F32(XN), B_U16(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},                              \
    {"crossentropy16 (backward in place)", SLOT(crossentropy16), h,                            \
     c_crossentropy16_backward_in_place, {B_U16(XN * XV), {I32, XN, TARGETS, XV}}},            \
    {"crossentropy16 (forward)", SLOT(crossentropy16), h, c_crossentropy16_forward,            \
     {B_F32(XN), B_U16(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},                              \
    {"half_from_f32", SLOT(half_from_f32), h, c_half_from_f32, {B_U16(EN), B_F32(EN)}},        \
    {"half_to_f32", SLOT(half_to_f32), h, c_half_to_f32, {B_F32(EN), B_U16(EN)}},              \
    {"half_acc_f32", SLOT(half_acc_f32), h, c_half_acc_f32, {B_U16(EN), B_F32(EN)}},           \
    {"half_add", SLOT(half_add), h, c_half_add, {B_U16(EN), B_U16(EN), B_U16(EN)}},            \
    {"half_scale", SLOT(half_scale), h, c_half_scale, {B_U16(EN)}},                            \
    {"half_sumsq", SLOT(half_sumsq), h, c_half_sumsq, {B_U16(EN), B_F64}},                     \
    {"adamw_half_spans", SLOT(adamw_half_spans), h, c_adamw_half_spans,                        \
     {B_U16(EN), B_U16(EN), B_F32(EN), B_F32(EN), B_POS(EN)}},                                 \
    {"sgd_update_half", SLOT(sgd_update_half), h, c_sgd_update_half,                           \
     {B_U16(EN), B_U16(EN), B_F32(EN), B_F32(EN)}},                                            \
    {"sgd_update_half (no momentum)", SLOT(sgd_update_half), h, c_sgd_update_half,             \
     {B_U16(EN), B_U16(EN), B_F32(EN), B_NONE}}

static const kcase CASES[] = {
    {"matmul_forward", SLOT(matmul_forward), 0, c_matmul_forward,
     {B_F32(MN * MOC), B_F32(MN * MC), B_F32(MOC * MC), B_F32(MOC)}},
    {"matmul_forward (no bias)", SLOT(matmul_forward), 0, c_matmul_forward,
     {B_F32(MN * MOC), B_F32(MN * MC), B_F32(MOC * MC), B_NONE}},
    {"matmul_backward", SLOT(matmul_backward), 0, c_matmul_backward,
     {B_F32(MN * MC), B_F32(MOC * MC), B_F32(MOC), B_F32(MN * MOC), B_F32(MN * MC),
      B_F32(MOC * MC)}},
    {"matmul_backward (dinp only)", SLOT(matmul_backward), 0, c_matmul_backward,
     {B_F32(MN * MC), B_NONE, B_NONE, B_F32(MN * MOC), B_NONE, B_F32(MOC * MC)}},
    {"add_forward", SLOT(add_forward), 0, c_add_forward, {B_F32(EN), B_F32(EN), B_F32(EN)}},
    {"accumulate", SLOT(accumulate), 0, c_accumulate, {B_F32(EN), B_F32(EN)}},
    {"scale", SLOT(scale), 0, c_scale, {B_F32(EN)}},
    {"gelu_forward", SLOT(gelu_forward), 0, c_gelu_forward, {B_F32(EN), B_F32(EN)}},
    {"gelu_backward", SLOT(gelu_backward), 0, c_gelu_backward,
     {B_F32(EN), B_F32(EN), B_F32(EN)}},
    {"layernorm_forward", SLOT(layernorm_forward), 0, c_layernorm_forward,
     {B_F32(LN * LC), B_F32(LN), B_F32(LN), B_F32(LN * LC), B_F32(LC), B_F32(LC)}},
    {"layernorm_backward", SLOT(layernorm_backward), 0, c_layernorm_backward,
     {B_F32(LN * LC), B_F32(LC), B_F32(LC), B_F32(LN * LC), B_F32(LN * LC), B_F32(LC),
      B_F32(LN), B_POS(LN)}},
    {"embedding_forward", SLOT(embedding_forward), 0, c_embedding_forward,
     {B_F32(BN * BC), {I32, BN, IDS, BV}, B_F32(BV * BC)}},
    {"embedding_backward", SLOT(embedding_backward), 0, c_embedding_backward,
     {B_F32(BV * BC), B_F32(BN * BC), {I32, BN, IDS, BV}}},
    {"attention_forward", SLOT(attention_forward), 0, c_attention_forward,
     {B_F32(ACT), B_F32(ATT), B_F32(QKV)}},
    {"attention_backward", SLOT(attention_backward), 0, c_attention_backward,
     {B_F32(QKV), B_F32(ATT), B_F32(ACT), B_F32(QKV), B_POS(ATT)}},
    {"attention_forward_dropout", SLOT(attention_forward_dropout), 0,
     c_attention_forward_dropout, {B_F32(ACT), B_F32(ATT), B_F32(QKV)}},
    {"attention_backward_dropout", SLOT(attention_backward_dropout), 0,
     c_attention_backward_dropout, {B_F32(QKV), B_F32(ATT), B_F32(ACT), B_F32(QKV), B_POS(ATT)}},
    {"attention_forward_fused", SLOT(attention_forward_fused), 0, c_attention_forward_fused,
     {B_F32(ACT), B_F32(LSE), B_F32(QKV)}},
    {"attention_backward_fused", SLOT(attention_backward_fused), 0, c_attention_backward_fused,
     {B_F32(QKV), B_F32(LSE), B_F32(ACT), B_F32(QKV), B_F32(ACT), B_POS(LSE)}},
    {"attention_forward_fused (dropout)", SLOT(attention_forward_fused), 0,
     c_attention_forward_fused_dropout, {B_F32(ACT), B_F32(LSE), B_F32(QKV)}},
    {"attention_backward_fused (dropout)", SLOT(attention_backward_fused), 0,
     c_attention_backward_fused_dropout,
     {B_F32(QKV), B_F32(LSE), B_F32(ACT), B_F32(QKV), B_F32(ACT), B_POS(LSE)}},
    {"crossentropy_forward", SLOT(crossentropy_forward), 0, c_crossentropy_forward,
     {B_F32(XN), B_F32(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},
    {"crossentropy_backward", SLOT(crossentropy_backward), 0, c_crossentropy_backward,
     {B_F32(XN * XV), B_F32(XN * XV), {I32, XN, TARGETS, XV}}},
    {"crossentropy_forward_backward", SLOT(crossentropy_forward_backward), 0,
     c_crossentropy_forward_backward,
     {B_F32(XN), B_F32(XN * XV), B_F32(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},
    {"crossentropy_forward_backward (in place)", SLOT(crossentropy_forward_backward), 0,
     c_crossentropy_in_place, {B_F32(XN), B_F32(XN * XV), {I32, XN, TARGETS, XV}, B_F64}},
    {"crossentropy_backward (in place)", SLOT(crossentropy_backward), 0,
     c_crossentropy_backward_in_place, {B_F32(XN * XV), {I32, XN, TARGETS, XV}}},
    {"dropout_forward", SLOT(dropout_forward), 0, c_dropout_forward, {B_F32(EN), B_F32(EN)}},
    {"dropout_backward", SLOT(dropout_backward), 0, c_dropout_backward, {B_F32(EN), B_F32(EN)}},
    {"dropout_add_forward", SLOT(dropout_add_forward), 0, c_dropout_add_forward,
     {B_F32(EN), B_F32(EN), B_F32(EN)}},
    {"adamw_update", SLOT(adamw_update), 0, c_adamw_update,
     {B_F32(EN), B_F32(EN), B_F32(EN), B_POS(EN)}},
    {"adamw_spans", SLOT(adamw_spans), 0, c_adamw_spans,
     {B_F32(EN), B_F32(EN), B_F32(EN), B_POS(EN)}},
    {"sgd_update", SLOT(sgd_update), 0, c_sgd_update, {B_F32(EN), B_F32(EN), B_F32(EN)}},
    {"sgd_update (no momentum)", SLOT(sgd_update), 0, c_sgd_update,
     {B_F32(EN), B_F32(EN), B_NONE}},
    {"sumsq", SLOT(sumsq), 0, c_sumsq, {B_F32(EN), B_F64}},
    HALF_CASES(DS_HALF_BF16),
    HALF_CASES(DS_HALF_F16),
};
#define NCASES (sizeof CASES / sizeof CASES[0])
#define NSLOTS (sizeof(ds_kernel_table) / sizeof(void (*)(void)))

static size_t elem_size(btype t) {
    static const size_t size[] = {0, 4, 4, 2, 8};
    return size[t];
}

static void *fill(const buf *b, ds_half h) {
    size_t n = b->n;
    void *p = malloc(n * elem_size(b->t));
    float *f = b->t == U16 ? malloc(n * sizeof *f) : NULL;
    for (size_t i = 0; i < n; i++) {
        double u = tu_uniform();
        switch (b->t) {
        case F32: ((float *)p)[i] = b->init == POS ? (float)(0.1 + 0.9 * u) : (float)(2 * u - 1);
            break;
        case F64: ((double *)p)[i] = 2 * u - 1; break;
        case I32: ((int32_t *)p)[i] = (int32_t)(u * (b->max + (b->init == TARGETS))) -
                                      (b->init == TARGETS); break;
        case U16: f[i] = (float)(2 * u - 1); break;
        case NONE: break;
        }
    }
    if (f) ds_half_from_f32(h, p, f, n);
    free(f);
    return p;
}

/* Runs one case on the host (ds_cpu_kernels) and on d; every buffer must match. */
static void run_case(ds_device *d, const kcase *c) {
    void *host[9] = {0}, *dev[9] = {0};
    size_t bytes[9] = {0};
    for (int i = 0; i < 9; i++) {
        if (c->b[i].t == NONE) continue;
        bytes[i] = c->b[i].n * elem_size(c->b[i].t);
        host[i] = fill(&c->b[i], c->h);
        dev[i] = dev_alloc(d, bytes[i]);
        dev_put(d, dev[i], host[i], bytes[i]);
    }
    c->call(&ds_cpu_kernels, host, c->h);
    c->call(d->k, dev, c->h);
    for (int i = 0; i < 9; i++) {
        if (!host[i]) continue;
        unsigned char *back = malloc(bytes[i]);
        dev_get(d, back, dev[i], bytes[i]);
        if (memcmp(back, host[i], bytes[i]) != 0) {
            size_t k = 0;
            while (((unsigned char *)host[i])[k] == back[k]) k++;
            fprintf(stderr, "%s (%s): buffer %d differs from the CPU's at byte %zu of %zu\n",
                    c->name, c->h == DS_HALF_F16 ? "fp16" : "bf16", i, k, bytes[i]);
            fail();
        }
        free(back);
        free(host[i]);
        d->ops->free(d, dev[i], bytes[i]);
    }
}

/* Every entry of the table has a case, and the simulator fills every entry. */
static void test_every_entry_covered(void **state) {
    (void)state;
    for (int bwd = 0; bwd < 2; bwd++) {
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, bwd, MN, MC, MOC, 0), 4 * WS16(bwd));
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, bwd, HN, HC, HOC, 0), 4 * WS16H(bwd));
        /* a 16-bit input or output gradient takes the parts an fp32 one does */
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, bwd, MN, MC, MOC, DS_MM16_IN),
                         4 * WS16(bwd));
        assert_int_equal(ds_layernorm16_workspace(bwd, LC), 4 * WSL(bwd));
    }
    for (int io = DS_MM16_OUT; io <= IO16; io++) {
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 0, MN, MC, MOC, io), 4 * (WS16(0) + WS16O));
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 0, HN, HC, HOC, io), 4 * (WS16H(0) + WS16HO));
        assert_int_equal(ds_matmul16_workspace(DS_GEMM16_F32, 1, HN, HC, HOC, io), 4 * WS16H(1));
    }
    assert_int_equal(ds_embedding16_workspace(BN, BC), 4 * WSE);
    for (int bwd = 0; bwd < 2; bwd++)
        assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, bwd, AB * AT, AC, 1, 1, 0),
                         4 * WSA(bwd));
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 0, AB * AT, AC, 1, 0, 0), 4 * QKV);
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 0, AB * AT, AC, 0, 1, 0), 4 * ACT);
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 1, AB * AT, AC, 0, 1, 0), 0);
    assert_int_equal(ds_attention16_workspace(DS_ATTN16_F32, 1, AB * AT, AC, 1, 1, 1), 4 * WSA16D);
    int covered[NSLOTS] = {0};
    for (size_t i = 0; i < NCASES; i++) covered[CASES[i].slot / sizeof(void (*)(void))] = 1;
    ds_device *d = open_sim("256MiB", NULL);
    for (size_t s = 0; s < NSLOTS; s++) {
        void (*entry)(void);
        memcpy(&entry, (const char *)d->k + s * sizeof entry, sizeof entry);
        if (!covered[s] || !entry) fprintf(stderr, "table slot %zu: no case or no entry\n", s);
        assert_true(covered[s] && entry != NULL);
    }
    close_sim(d);
}

static void table_at_threads(int threads) {
    ds_kernels_set_threads(threads);
    ds_device *d = open_sim("256MiB", NULL);
    tu_seed(1000 + (uint64_t)threads);
    for (size_t i = 0; i < NCASES; i++) run_case(d, &CASES[i]);
    dev_sync_ok(d);
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    assert_int_equal(m.in_use, 0);
    close_sim(d);
    ds_kernels_set_threads(0);
}

static void test_table_matches_cpu_1_thread(void **state) {
    (void)state;
    table_at_threads(1);
}

static void test_table_matches_cpu_3_threads(void **state) {
    (void)state;
    table_at_threads(3);
}

/* A kernel's result is what to_host reads right after the launch (no sync between),
 * even when the stream runs late. */
static void test_to_host_after_kernel(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", "3000");
    float x[257], back[257];
    for (int i = 0; i < 257; i++) x[i] = (float)i;
    float *dx = dev_alloc(d, sizeof x);
    dev_put(d, dx, x, sizeof x);
    for (int r = 0; r < 5; r++) {
        d->k->scale(dx, 3.0f, 257);
        dev_get(d, back, dx, sizeof back);
        for (int i = 0; i < 257; i++) x[i] *= 3.0f;
        assert_memory_equal(back, x, sizeof x);
    }
    d->ops->free(d, dx, sizeof x);
    close_sim(d);
}

/* A host pointer given to a kernel: the next waiting call says which kernel and which
 * argument; every later one says it again; the first error is the one kept. */
static void test_host_pointer_is_sticky_error(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float host[100] = {0}, back[100];
    float *x = dev_alloc(d, sizeof host);
    d->k->accumulate(x, host, 100);
    d->k->scale(NULL, 1.0f, 100); /* a second bad launch: not the error reported */
    expect_sync_error(d, "kernel accumulate: argument src: ");
    expect_sync_error(d, "is not device memory (a host pointer?");
    ds_err err = {{0}};
    assert_int_equal(d->ops->to_host(d, back, x, sizeof back, &err), -1);
    assert_non_null(strstr(err.msg, "kernel accumulate: argument src"));
    close_sim(d);
}

static void test_null_argument_reported(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *x = dev_alloc(d, 400);
    d->k->accumulate(NULL, x, 100);
    expect_sync_error(d, "kernel accumulate: argument dst: NULL");
    close_sim(d);
}

/* A shape larger than the buffer: caught before the kernel writes past it. */
static void test_range_past_buffer_reported(void **state) {
    (void)state;
    ds_device *d = open_sim("64MiB", NULL);
    float *a = dev_alloc(d, 400), *b = dev_alloc(d, 404), *out = dev_alloc(d, 404);
    d->k->add_forward(out, a, b, 101);
    expect_sync_error(d, "kernel add_forward: argument a: ");
    expect_sync_error(d, "+404 bytes) runs past the end of its allocation (400 bytes");
    close_sim(d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_every_entry_covered, close_left_open),
        cmocka_unit_test_teardown(test_table_matches_cpu_1_thread, close_left_open),
        cmocka_unit_test_teardown(test_table_matches_cpu_3_threads, close_left_open),
        cmocka_unit_test_teardown(test_to_host_after_kernel, close_left_open),
        cmocka_unit_test_teardown(test_host_pointer_is_sticky_error, close_left_open),
        cmocka_unit_test_teardown(test_null_argument_reported, close_left_open),
        cmocka_unit_test_teardown(test_range_past_buffer_reported, close_left_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
