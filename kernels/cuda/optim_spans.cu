// AdamW over the spans of a flat buffer (kernels.h's ds_adamw_spans and
// ds_adamw_half_spans): a stage's parameters differ only in their weight decay, so the
// whole stage (or ZeRO shard) is one launch rather than one per parameter tensor (GPT-2
// 124M: 148 launches a step, most of them biases and LayerNorms of a few hundred
// elements, each costing a launch's latency for almost no work).
#include <limits.h>

#include "cuda_common.cuh"
#include "half_math.cuh"

// The spans of one launch travel in its parameters (well within the 4 KB every
// architecture takes), so the host's list needs no device copy and the launch no host
// wait; more spans take more launches.
#define SPANS_PER_LAUNCH 64
// Elements one block steps: blocks map to spans through first_block.
#define SPAN_ELEMS (DS_CU_THREADS * 8)

struct span_table {
    size_t off[SPANS_PER_LAUNCH], n[SPANS_PER_LAUNCH];
    float decay[SPANS_PER_LAUNCH];               // ds_km_adamw's 1 - lr * weight_decay
    unsigned first_block[SPANS_PER_LAUNCH + 1];  // span s has blocks [first_block[s], [s + 1])
    int count;
};

// The span block b works in: the last s with first_block[s] <= b.
__device__ static int span_of(const span_table &t, unsigned b) {
    int lo = 0, hi = t.count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t.first_block[mid] <= b) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// half < 0: w and grad are fp32 and w is the parameter; else 16-bit bits, the step on the
// fp32 master and w rounded from it in the same pass (optim_half.cu's element updates)
__global__ static void adamw_spans_k(int half, void *w, const void *grad, float *master,
                                     float *m, float *v, span_table t, ds_km_adamw k) {
    int s = span_of(t, blockIdx.x);
    k.decay = t.decay[s];
    size_t start = t.off[s] + (size_t)(blockIdx.x - t.first_block[s]) * SPAN_ELEMS;
    size_t end = t.off[s] + t.n[s];
    if (start + SPAN_ELEMS < end) end = start + SPAN_ELEMS;
    if (half < 0) {
        float *p = (float *)w;
        const float *g = (const float *)grad;
        for (size_t i = start + threadIdx.x; i < end; i += blockDim.x)
            ds_km_adamw1(&p[i], g[i], &m[i], &v[i], &k);
        return;
    }
    ds_half h = (ds_half)half;
    uint16_t *w16 = (uint16_t *)w;
    const uint16_t *g16 = (const uint16_t *)grad;
    for (size_t i = start + threadIdx.x; i < end; i += blockDim.x) {
        float p = master[i], mi = m[i], vi = v[i];
        ds_km_adamw1(&p, ds_cu_widen(h, g16[i]), &mi, &vi, &k);
        master[i] = p, m[i] = mi, v[i] = vi;
        w16[i] = ds_cu_narrow(h, p);
    }
}

extern "C" int ds_cuda_adamw_spans(ds_cuda_ctx *ctx, int half, void *w, const void *grad,
                                   float grad_scale, float *master, float *m, float *v,
                                   const ds_decay_span *spans, int nspans, float lr,
                                   float beta1, float beta2, float eps, int t) {
    DS_CU_ARG(ctx, half == -1 || half == DS_HALF_BF16 || half == DS_HALF_F16);
    DS_CU_ARG(ctx, nspans == 0 || (spans && w && grad && m && v && (half < 0 || master)));
    DS_CU_ARG(ctx, nspans >= 0 && t >= 1);
    // the decay factor as the CPU computes it for each span (ds_km_adamw_consts), the same
    // float, so both step every element alike
    ds_km_adamw k = ds_km_adamw_consts(lr, beta1, beta2, eps, 0.0f, grad_scale, t);
    for (int s = 0; s < nspans;) {
        span_table tab;
        size_t blocks = 0;
        int c = 0;
        for (; s < nspans && c < SPANS_PER_LAUNCH; s++) {
            if (spans[s].n == 0) continue;
            tab.off[c] = spans[s].off;
            tab.n[c] = spans[s].n;
            tab.decay[c] = ds_km_adamw_consts(lr, beta1, beta2, eps, spans[s].weight_decay,
                                              grad_scale, t).decay;
            tab.first_block[c] = (unsigned)blocks;
            blocks += (spans[s].n + SPAN_ELEMS - 1) / SPAN_ELEMS;
            DS_CU_ARG(ctx, blocks <= (size_t)INT_MAX);
            c++;
        }
        if (c == 0) break;
        tab.first_block[c] = (unsigned)blocks;
        tab.count = c;
        adamw_spans_k<<<(unsigned)blocks, DS_CU_THREADS, 0, ctx->stream>>>(half, w, grad, master,
                                                                           m, v, tab, k);
        DS_CU_LAUNCHED(ctx, "adamw spans");
    }
    return 0;
}
