/* Token/position embedding lookup. Backward scatters rows; ids repeat, so threads split
 * the columns (never the rows) and rows are added in order n = 0..N-1. With a 16-bit
 * table the backward groups the positions by id instead, so each touched row is summed
 * in fp32 once and rounded once, with no fp32 copy of the table. */
#include <stdlib.h>
#include <string.h>

#include "half_block.h"
#include "kernel_table.h" /* ds_embedding16_workspace's layout */
#include "kernels.h"
#include "simd.h"

void ds_embedding_forward(float *out, const int32_t *ids, const float *table, int N, int C) {
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, table + (size_t)ids[n] * C, (size_t)C * sizeof(float));
}

void ds_embedding_backward(float *dtable, const float *dout, const int32_t *ids, int N, int C) {
    enum { COLS = 64 }; /* 12 blocks for C=768: balanced over 2, 3, 4 or 6 threads */
#pragma omp parallel for schedule(static) if ((size_t)N * C > DS_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += COLS) {
        int c1 = c0 + COLS < C ? c0 + COLS : C;
        for (int n = 0; n < N; n++) {
            float *dst = dtable + (size_t)ids[n] * C;
            const float *src = dout + (size_t)n * C;
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

/* ---- 16-bit tables (kernel_table.h's embedding16 and posemb16 pairs) ------------------ */

void ds_embedding16_forward(ds_half h, float *out, const int32_t *ids, const uint16_t *table,
                            int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > DS_PAR_MIN)
    for (int n = 0; n < N; n++)
        ds_half_widen(h, out + (size_t)n * C, table + (size_t)ids[n] * C, (size_t)C);
}

static int by_key(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

void ds_embedding16_backward(ds_half h, uint16_t *dtable, const float *dout, const int32_t *ids,
                             int N, int C, void *ws) {
    /* (id, n) keys: sorted, each id's positions come together in order n = 0..N-1 */
    uint64_t *key = ws;
    float *sum = (float *)((char *)ws + ds_ws_part((size_t)N * sizeof *key));
    for (int n = 0; n < N; n++) key[n] = (uint64_t)(uint32_t)ids[n] << 32 | (uint32_t)n;
    qsort(key, (size_t)N, sizeof *key, by_key);
    for (int i = 0; i < N;) {
        uint32_t id = (uint32_t)(key[i] >> 32);
        memset(sum, 0, (size_t)C * sizeof *sum);
        for (; i < N && (uint32_t)(key[i] >> 32) == id; i++) {
            const float *src = dout + (size_t)(uint32_t)key[i] * C;
            for (int c = 0; c < C; c++) sum[c] += src[c];
        }
        ds_half_acc_f32(h, dtable + (size_t)id * C, sum, (size_t)C);
    }
}

enum { POS_BLOCK = 512 }; /* elements of the table widened or summed on the stack */

void ds_posemb16_forward(ds_half h, float *out, const float *inp, const uint16_t *table, int B,
                         int T, int C) {
    size_t tc = (size_t)T * C;
#pragma omp parallel for schedule(static) if ((size_t)B * tc > DS_PAR_MIN)
    for (size_t i = 0; i < tc; i += POS_BLOCK) {
        size_t m = tc - i < POS_BLOCK ? tc - i : POS_BLOCK;
        float w[POS_BLOCK];
        ds_half_widen(h, w, table + i, m);
        for (int b = 0; b < B; b++)
            for (size_t j = 0; j < m; j++) out[b * tc + i + j] = inp[b * tc + i + j] + w[j];
    }
}

void ds_posemb16_backward(ds_half h, uint16_t *dtable, const float *dout, int B, int T, int C) {
    size_t tc = (size_t)T * C;
#pragma omp parallel for schedule(static) if ((size_t)B * tc > DS_PAR_MIN)
    for (size_t i = 0; i < tc; i += POS_BLOCK) {
        size_t m = tc - i < POS_BLOCK ? tc - i : POS_BLOCK;
        float s[POS_BLOCK] = {0};
        for (int b = 0; b < B; b++) /* batch order: fixed */
            for (size_t j = 0; j < m; j++) s[j] += dout[b * tc + i + j];
        ds_half_acc_block(h, dtable + i, s, m);
    }
}
