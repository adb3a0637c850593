// Causal multi-head attention on packed qkv[B,T,3C], one block per (query row, head,
// batch) in forward, and in backward one block per query row (datt, softmax backward,
// dq) then one per key row (dk, dv summed over the query rows t >= u in order). Every sum
// has one owner thread or a fixed block reduction: no atomics.
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

__global__ static void forward_k(float *out, float *att, const float *qkv, att_dims d) {
    extern __shared__ float q[]; // hs floats
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
    __syncthreads(); // the row's probabilities, written by all threads, are read below
    float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int u = 0; u <= t; u++) acc += a[u] * base[u * C3 + 2 * C + i];
        o[i] = acc;
    }
}

extern "C" int ds_cuda_attention_forward(ds_cuda_ctx *ctx, float *out, float *att,
                                         const float *qkv, int B, int T, int C, int NH) {
    DS_CU_ARG(ctx, out && att && qkv && B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535);
    att_dims d = dims_of(T, C, NH);
    dim3 grid(T, NH, B);
    forward_k<<<grid, ATT_THREADS, d.hs * sizeof(float), ctx->stream>>>(out, att, qkv, d);
    DS_CU_LAUNCHED(ctx, "attention forward");
    return 0;
}

// per query row t: dpre[u] = a[u] * (dy . v[u] - sum_w a[w] dy . v[w]) * scale into
// scratch, then dq[t] += sum_u dpre[u] k[u]
__global__ static void backward_query_k(float *dqkv, float *scratch, const float *dout,
                                        const float *qkv, const float *att, att_dims d) {
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
    for (int u = threadIdx.x; u <= t; u += blockDim.x) {
        float datt = dot(dy, base + u * C3 + 2 * C, hs);
        dpre[u] = datt;
        part += a[u] * datt;
    }
    float dsum = ds_cu_block_sum(part, sh);
    for (int u = threadIdx.x; u <= t; u += blockDim.x)
        dpre[u] = a[u] * (dpre[u] - dsum) * d.scale;
    __syncthreads();
    float *dq = dqkv + (size_t)b * T * C3 + t * C3 + (size_t)h * hs;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float acc = 0.0f;
        for (int u = 0; u <= t; u++) acc += dpre[u] * base[u * C3 + C + i];
        dq[i] += acc;
    }
}

// per key row u: dk[u] += sum_{t>=u} dpre[t][u] q[t]; dv[u] += sum_{t>=u} a[t][u] dy[t]
__global__ static void backward_key_k(float *dqkv, const float *scratch, const float *dout,
                                      const float *qkv, const float *att, att_dims d) {
    int u = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int T = d.T, C = d.C, hs = d.hs;
    size_t C3 = 3 * (size_t)C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dyb = dout + (size_t)b * T * C + (size_t)h * hs;
    size_t head = ((size_t)b * d.NH + h) * T * T;
    float *dk = dqkv + (size_t)b * T * C3 + u * C3 + C + (size_t)h * hs;
    float *dv = dk + C;
    for (int i = threadIdx.x; i < hs; i += blockDim.x) {
        float ak = 0.0f, av = 0.0f;
        for (int t = u; t < T; t++) {
            size_t tu = head + (size_t)t * T + u;
            ak += scratch[tu] * base[t * C3 + i];
            av += att[tu] * dyb[(size_t)t * C + i];
        }
        dk[i] += ak;
        dv[i] += av;
    }
}

extern "C" int ds_cuda_attention_backward(ds_cuda_ctx *ctx, float *dqkv, float *scratch,
                                          const float *dout, const float *qkv, const float *att,
                                          int B, int T, int C, int NH) {
    DS_CU_ARG(ctx, dqkv && scratch && dout && qkv && att);
    DS_CU_ARG(ctx, B > 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0);
    DS_CU_ARG(ctx, B <= 65535 && NH <= 65535);
    att_dims d = dims_of(T, C, NH);
    dim3 grid(T, NH, B);
    backward_query_k<<<grid, ATT_THREADS, d.hs * sizeof(float), ctx->stream>>>(
        dqkv, scratch, dout, qkv, att, d);
    DS_CU_LAUNCHED(ctx, "attention backward (queries)");
    backward_key_k<<<grid, ATT_THREADS, 0, ctx->stream>>>(dqkv, scratch, dout, qkv, att, d);
    DS_CU_LAUNCHED(ctx, "attention backward (keys)");
    return 0;
}
