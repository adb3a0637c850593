// Linear layer through cuBLAS (column-major): a row-major [R, K] matrix is a column-major
// [K, R] one, so out[N,OC] = inp[N,C] @ W[OC,C]^T is out^T = W^T(op T on W's [C,OC]
// view) * inp^T. Bias is pre-filled into out and added with beta = 1, as on the CPU.
#include "cuda_common.cuh"

__global__ static void fill_rows(float *out, const float *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias[i % OC];
}

extern "C" int ds_cuda_matmul_forward(ds_cuda_ctx *ctx, float *out, const float *inp,
                                      const float *weight, const float *bias, int N, int C,
                                      int OC) {
    DS_CU_ARG(ctx, out && inp && weight && N > 0 && C > 0 && OC > 0);
    float one = 1.0f, beta = 0.0f;
    if (bias) {
        fill_rows<<<ds_cu_blocks((size_t)N * OC), DS_CU_THREADS, 0, ctx->stream>>>(out, bias, N, OC);
        DS_CU_LAUNCHED(ctx, "matmul bias");
        beta = 1.0f;
    }
    DS_CU_BLAS(ctx, cublasSgemm(ctx->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C,
                                inp, C, &beta, out, OC));
    return 0;
}

struct col_of {
    const float *m;
    int C;
    __device__ float2 operator()(int n, int c) const {
        return make_float2(m[(size_t)n * C + c], 0.0f);
    }
};

extern "C" int ds_cuda_matmul_backward(ds_cuda_ctx *ctx, float *dinp, int acc, float *dweight,
                                       float *dbias, const float *dout, const float *inp,
                                       const float *weight, int N, int C, int OC) {
    DS_CU_ARG(ctx, dout && N > 0 && C > 0 && OC > 0);
    DS_CU_ARG(ctx, !dinp || weight);
    DS_CU_ARG(ctx, !dweight || inp);
    float one = 1.0f, beta = acc ? 1.0f : 0.0f;
    if (dinp) // dinp[N,C] (+)= dout[N,OC] @ W[OC,C]; beta 0: dinp is not read
        DS_CU_BLAS(ctx, cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C,
                                    dout, OC, &beta, dinp, C));
    if (dweight) // dW[OC,C] += dout^T @ inp
        DS_CU_BLAS(ctx, cublasSgemm(ctx->blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C,
                                    dout, OC, &one, dweight, C));
    if (dbias) return ds_cu_colsum2(ctx, dbias, (float *)NULL, N, OC, col_of{dout, OC});
    return 0;
}
