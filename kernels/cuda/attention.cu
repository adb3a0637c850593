// Causal multi-head attention on packed qkv[B,T,3C], one block per (query row, head,
// batch) in forward, and in backward one block per query row (datt, softmax backward,
// dq) then one per key row (dk, dv summed over the query rows t >= u in order). Every sum
// has one owner thread or a fixed block reduction: no atomics. This is the reference the
// fused kernel (flash_attention.cu) is checked against; it keeps the [B,NH,T,T]
// probabilities, as the CPU kernel does.
//
// Dropout on the probabilities (the _dropout pair): element (b,h,t,u) of P is kept or
// dropped by the draw kernel_math.h's ds_km_attn_elem maps it to (the CPU's and the fused
// kernels' mask); att keeps P undropped and backward redraws the mask.

#include "cuda_common.cuh"

#define ATT_THREADS 128

struct att_dims {
    int T, C, NH, hs;
    float scale;
};

static att_dims dims_of(int T, int C, int NH) {
    att_dims d = {T, C, NH, C / NH, 1.0f / sqrtf((float)(C / NH))};
    return d;
}

__device__ static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

__global__ static void forward_k(float *out, float *att, const float *qkv, att_dims d,
                                 ds_km_drop dr) {
    extern __shared__ float q[]; // hs floats, then with dropout the row's dropped P
    __shared__ float sh[32];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) q[i] = base[t * C3 + i];
    __syncthreads();
    float *a = att + (((size_t)b * d.NH + h) * T + t) * T;
    float m = -INFINITY;
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        float s = dot(q, base + u * C3 + C, hs) * d.scale;
        a[u] = s;
        m = fmaxf(m, s);
    }
    m = ds_cu_block_max(m, sh, -INFINITY);
    float sum = 0.0f;
    for (int u = threadIdx.x; u <= t; u += blockDim.x) { // same thread, same u: no race
        float e = ds_km_expf(a[u] - m);
        a[u] = e;
        sum += e;
    }
    float inv = 1.0f / ds_cu_block_sum(sum, sh);
    for (int u = threadIdx.x; u <= t; u += blockDim.x) a[u] *= inv;
    for (int u = t + 1 + threadIdx.x; u < T; u += blockDim.x) a[u] = 0.0f;
    const float *pv = a; // the probabilities that meet V
    if (dr.p > 0.0f) {
        float *pd = q + hs;
        uint64_t row = ds_km_attn_elem(b, h, t, 0, d.NH, T);
        for (int u = threadIdx.x; u <= t; u += blockDim.x)
            pd[u] = a[u] * ds_km_drop_at(dr, row + (uint64_t)u);
        pv = pd;
    }
    __syncthreads(); // the row's probabilities, written by all threads, are read below
    float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int u = 0; u <= t; u++) acc += pv[u] * base[u * C3 + 2 * C + i];
        o[i] = acc;
    }
}

// A block's dynamic shared memory (bytes) beyond what a launch gets without asking: the
// kernel's static shared memory and the dynamic part together past 48 KiB need the
// kernel's MaxDynamicSharedMemorySize raised first, up to the device's opt-in limit.
static int shared_ok(ds_cuda_ctx *ctx, const void *kernel, size_t bytes) {
    cudaFuncAttributes fa;
    DS_CU_CHECK(ctx, cudaFuncGetAttributes(&fa, kernel));
    if (fa.sharedSizeBytes + bytes <= 48 * 1024) return 0;
    int dev = 0, max = 0;
    DS_CU_CHECK(ctx, cudaGetDevice(&dev));
    DS_CU_CHECK(ctx, cudaDeviceGetAttribute(&max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (fa.sharedSizeBytes + bytes > (size_t)max)
        return DS_CU_FAIL(ctx, "attention with dropout: a row of T needs %zu bytes of shared "
                               "memory (and %zu of the kernel's own), the device has %d", bytes,
                          fa.sharedSizeBytes, max);
    DS_CU_CHECK(ctx, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    return 0;
}

static int attention_forward(ds_cuda_ctx *ctx, float *out, float *att, const float *qkv, int B,
                             int T, int C, int NH, ds_km_drop dr) {
    DS_CU_ARG(ctx, out && att && qkv && B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535);
    att_dims d = dims_of(T, C, NH);
    dim3 grid(T, NH, B);
    size_t shared = ((size_t)d.hs + (dr.p > 0.0f ? (size_t)T : 0)) * sizeof(float);
    if (shared_ok(ctx, (const void *)forward_k, shared) != 0) return -1;
    forward_k<<<grid, ATT_THREADS, shared, ctx->stream>>>(out, att, qkv, d, dr);
    DS_CU_LAUNCHED(ctx, "attention forward");
    return 0;
}

extern "C" int ds_cuda_attention_forward(ds_cuda_ctx *ctx, float *out, float *att,
                                         const float *qkv, int B, int T, int C, int NH) {
    return attention_forward(ctx, out, att, qkv, B, T, C, NH, ds_cu_drop(0.0f, ds_rng_key{}));
}

extern "C" int ds_cuda_attention_forward_dropout(ds_cuda_ctx *ctx, float *out, float *att,
                                                 const float *qkv, int B, int T, int C, int NH,
                                                 float p, ds_rng_key key) {
    DS_CU_ARG(ctx, p >= 0.0f && p < 1.0f);
    return attention_forward(ctx, out, att, qkv, B, T, C, NH, ds_cu_drop(p, key));
}

// per query row t: dpre[u] = a[u] * (dy . v[u] - sum_w a[w] dy . v[w]) * scale into
// scratch, then dq[t] += sum_u dpre[u] k[u]
__global__ static void backward_query_k(float *dqkv, int acc, float *scratch, const float *dout,
                                        const float *qkv, const float *att, att_dims d,
                                        ds_km_drop dr) {
    extern __shared__ float dy[]; // hs floats
    __shared__ float sh[32];
    int t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dyg = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) dy[i] = dyg[i];
    __syncthreads();
    size_t row = (((size_t)b * d.NH + h) * T + t) * T;
    const float *a = att + row;
    float *dpre = scratch + row;
    float part = 0.0f;
    uint64_t mrow = ds_km_attn_elem(b, h, t, 0, d.NH, T);
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        float datt = dot(dy, base + u * C3 + 2 * C, hs);
        if (dr.p > 0.0f) datt *= ds_km_drop_at(dr, mrow + (uint64_t)u); // the dropped row's
        dpre[u] = datt;
        part += a[u] * datt;
    }
    float dsum = ds_cu_block_sum(part, sh);
    for (int u = threadIdx.x; u <= t; u += blockDim.x)
        dpre[u] = a[u] * (dpre[u] - dsum) * d.scale;
    __syncthreads();
    float *dq = dqkv + (size_t)b * T * C3 + t * C3 + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float accum = 0.0f;
        for (int u = 0; u <= t; u++) accum += dpre[u] * base[u * C3 + C + i];
        ds_cu_grad(dq + i, accum, acc);
    }
}

// per key row u: dk[u] += sum_{t>=u} dpre[t][u] q[t]; dv[u] += sum_{t>=u} a[t][u] dy[t]
// (with dropout a[t][u] times its mask: the probabilities that met V, column u of the
// mask drawn once into shared memory)
__global__ static void backward_key_k(float *dqkv, int acc, const float *scratch, const float *dout,
                                      const float *qkv, const float *att, att_dims d, ds_km_drop dr) {
    extern __shared__ float mcol[]; // with dropout: mcol[t - u], t = u..T-1
    int u = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dyb = dout + (size_t)b * T * C + (size_t)h * hs;
    size_t head = ((size_t)b * d.NH + h) * T * T;
    float *dk = dqkv + (size_t)b * T * C3 + u * C3 + C + (size_t)h * hs;
    float *dv = dk + C;
    if (dr.p > 0.0f) {
        for (int t = u + threadIdx.x; t < T; t += blockDim.x)
            mcol[t - u] = ds_km_drop_at(dr, ds_km_attn_elem(b, h, t, u, d.NH, T));
        __syncthreads();
    }
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float ak = 0.0f, av = 0.0f;
        for (int t = u; t < T; t++) {
            size_t tu = head + (size_t)t * T + u;
            ak += scratch[tu] * base[t * C3 + i];
            float a = dr.p > 0.0f ? att[tu] * mcol[t - u] : att[tu];
            av += a * dyb[(size_t)t * C + i];
        }
        ds_cu_grad(dk + i, ak, acc);
        ds_cu_grad(dv + i, av, acc);
    }
}

static int attention_backward(ds_cuda_ctx *ctx, float *dqkv, int acc, float *scratch,
                              const float *dout, const float *qkv, const float *att, int B, int T,
                              int C, int NH, ds_km_drop dr) {
    DS_CU_ARG(ctx, dqkv && scratch && dout && qkv && att);
    DS_CU_ARG(ctx, B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535);
    att_dims d = dims_of(T, C, NH);
    dim3 grid(T, NH, B);
    backward_query_k<<<grid, ATT_THREADS, d.hs * sizeof(float), ctx->stream>>>(
        dqkv, acc, scratch, dout, qkv, att, d, dr);
    DS_CU_LAUNCHED(ctx, "attention backward (queries)");
    size_t shared = dr.p > 0.0f ? (size_t)T * sizeof(float) : 0;
    if (shared_ok(ctx, (const void *)backward_key_k, shared) != 0) return -1;
    backward_key_k<<<grid, ATT_THREADS, shared, ctx->stream>>>(dqkv, acc, scratch, dout, qkv, att,
                                                               d, dr);
    DS_CU_LAUNCHED(ctx, "attention backward (keys)");
    return 0;
}

extern "C" int ds_cuda_attention_backward(ds_cuda_ctx *ctx, float *dqkv, int acc, float *scratch,
                                          const float *dout, const float *qkv, const float *att,
                                          int B, int T, int C, int NH) {
    return attention_backward(ctx, dqkv, acc, scratch, dout, qkv, att, B, T, C, NH,
                              ds_cu_drop(0.0f, ds_rng_key{}));
}

extern "C" int ds_cuda_attention_backward_dropout(ds_cuda_ctx *ctx, float *dqkv, int acc,
                                                  float *scratch, const float *dout,
                                                  const float *qkv, const float *att, int B, int T,
                                                  int C, int NH, float p, ds_rng_key key) {
    DS_CU_ARG(ctx, p >= 0.0f && p < 1.0f);
    return attention_backward(ctx, dqkv, acc, scratch, dout, qkv, att, B, T, C, NH,
                              ds_cu_drop(p, key));
}
