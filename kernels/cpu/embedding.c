/* Token/position embedding lookup. Backward scatters rows; ids repeat, so threads split
 * the columns (never the rows) and rows are added in order n = 0..N-1. */
#include <string.h>

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
