// Internals shared by the CUDA kernel files: the context, error reporting, launch shapes
// and the deterministic block reductions (fixed tree for a fixed block size: no atomics).
#ifndef DS_CUDA_COMMON_CUH
#define DS_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "ds_gpu.h"
#include "kernels_cuda.h"
}
#include "kernel_math.h"

struct ds_cuda_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt; // made on first use by matmul_lt.cu; shares blas_ws
    void *blas_ws; // cuBLAS workspace owned here: results then do not depend on a pool
    size_t blas_ws_bytes;
    void *scratch; // grown on demand, for partial sums and sort buffers
    size_t scratch_bytes;
    cudaMemPool_t pool; // set by the cuda device: scratch then comes from its pool,
                        // stream-ordered (no cudaMalloc, no sync when it grows)
    char err[512];
};

// Fills ctx->err with "file:line: message" and returns -1.
int ds_cu_fail(ds_cuda_ctx *ctx, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// A scratch buffer of at least bytes on the context's stream (previous contents lost).
void *ds_cu_scratch(ds_cuda_ctx *ctx, size_t bytes);
const char *ds_cu_blas_status(cublasStatus_t s);

#define DS_CU_FAIL(ctx, ...) ds_cu_fail((ctx), __FILE__, __LINE__, __VA_ARGS__)
#define DS_CU_CHECK(ctx, call)                                                             \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) return DS_CU_FAIL(ctx, "%s: %s", #call, cudaGetErrorString(e_)); \
    } while (0)
#define DS_CU_BLAS(ctx, call)                                                              \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                   \
            return DS_CU_FAIL(ctx, "%s: %s", #call, ds_cu_blas_status(s_));               \
    } while (0)
// After a <<<>>> launch: configuration errors are reported now, faults at the next sync.
#define DS_CU_LAUNCHED(ctx, what)                                                          \
    do {                                                                                   \
        cudaError_t e_ = cudaGetLastError();                                               \
        if (e_ != cudaSuccess)                                                             \
            return DS_CU_FAIL(ctx, "%s launch: %s", what, cudaGetErrorString(e_));         \
    } while (0)
#define DS_CU_ARG(ctx, cond)                                                               \
    do {                                                                                   \
        if (!(cond)) return DS_CU_FAIL(ctx, "bad argument: %s", #cond);                   \
    } while (0)

// Elementwise launches: grid-stride loops over size_t n with at most this many blocks.
#define DS_CU_THREADS 256
// The dropout of p under key in kernel_math.h's form (p = 0: none), a kernel parameter.
static inline ds_km_drop ds_cu_drop(float p, ds_rng_key key) {
    return ds_km_drop_of(p, key.seed, key.step, key.layer, key.micro, key.offset);
}

static inline unsigned ds_cu_blocks(size_t n) {
    size_t b = (n + DS_CU_THREADS - 1) / DS_CU_THREADS;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}
// An input gradient's element: added to (acc, kernel_table.h) or written, never read.
__device__ inline void ds_cu_grad(float *p, float v, int acc) { *p = acc ? *p + v : v; }
// The loop of an elementwise kernel: i over [0, n), whatever the grid.
#define GRID_STRIDE(i, n)                                                                  \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);               \
         i += (size_t)gridDim.x * blockDim.x)
// Launches an elementwise kernel over n on the context's stream and returns from the
// calling ds_cuda_* function (0, or -1 with a launch error).
#define DS_CU_LAUNCH_N(ctx, name, kernel, n, ...)                                          \
    do {                                                                                   \
        if ((n) == 0) return 0;                                                            \
        kernel<<<ds_cu_blocks(n), DS_CU_THREADS, 0, (ctx)->stream>>>(__VA_ARGS__);        \
        DS_CU_LAUNCHED(ctx, name);                                                         \
        return 0;                                                                          \
    } while (0)

// ---- deterministic reductions -----------------------------------------------------
template <typename T> __device__ inline T ds_cu_warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <typename T> __device__ inline T ds_cu_warp_max(T v) {
    for (int o = 16; o > 0; o >>= 1) {
        T w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. shared must hold 32 values and is reused right after, so calls may follow one
// another.
template <typename T> __device__ inline T ds_cu_block_sum(T v, T *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = ds_cu_warp_sum(v);
    __syncthreads(); // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? shared[lane] : (T)0;
    return ds_cu_warp_sum(r);
}

template <typename T> __device__ inline T ds_cu_block_max(T v, T *shared, T lowest) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = ds_cu_warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    T r = lane < nwarps ? shared[lane] : lowest;
    return ds_cu_warp_max(r);
}

// Column sums of a [N, C] matrix in a fixed order, added (+=) into dst0[C] and dst1[C]
// (either may be NULL): rows are cut into P row groups that depend on N only, each group's
// columns are summed in row order, then the P partials in group order. F(n, c) gives the
// two values of element (n, c) as a float2.
#define DS_CU_COLSUM_TX 32
#define DS_CU_COLSUM_TY 8

template <typename F>
__global__ void ds_cu_colsum2_phase1(float2 *partials, int N, int C, int R, F f) {
    __shared__ float2 sh[DS_CU_COLSUM_TY][DS_CU_COLSUM_TX + 1];
    int c = blockIdx.x * DS_CU_COLSUM_TX + threadIdx.x;
    int r0 = blockIdx.y * R, r1 = min(N, r0 + R);
    float2 acc = make_float2(0.0f, 0.0f);
    if (c < C)
        for (int n = r0 + (int)threadIdx.y; n < r1; n += DS_CU_COLSUM_TY) {
            float2 v = f(n, c);
            acc.x += v.x;
            acc.y += v.y;
        }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        for (int j = 1; j < DS_CU_COLSUM_TY; j++) {
            acc.x += sh[j][threadIdx.x].x;
            acc.y += sh[j][threadIdx.x].y;
        }
        partials[(size_t)blockIdx.y * C + c] = acc;
    }
}

// (a template so each file that uses it gets its own copy without relocatable device code)
template <int Unused>
__global__ void ds_cu_colsum2_phase2(float *dst0, float *dst1, const float2 *partials, int P,
                                     int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float2 acc = partials[c];
    for (int p = 1; p < P; p++) {
        acc.x += partials[(size_t)p * C + c].x;
        acc.y += partials[(size_t)p * C + c].y;
    }
    if (dst0) dst0[c] += acc.x;
    if (dst1) dst1[c] += acc.y;
}

// rows per group: at least 32, at most 256 groups
static inline int ds_cu_colsum_rows(int N) {
    int R = (N + 255) / 256;
    return R < 32 ? 32 : R;
}

template <typename F>
int ds_cu_colsum2(ds_cuda_ctx *ctx, float *dst0, float *dst1, int N, int C, F f) {
    int R = ds_cu_colsum_rows(N), P = (N + R - 1) / R;
    float2 *partials = (float2 *)ds_cu_scratch(ctx, (size_t)P * C * sizeof(float2));
    if (!partials) return -1;
    dim3 grid((C + DS_CU_COLSUM_TX - 1) / DS_CU_COLSUM_TX, P);
    dim3 block(DS_CU_COLSUM_TX, DS_CU_COLSUM_TY);
    ds_cu_colsum2_phase1<<<grid, block, 0, ctx->stream>>>(partials, N, C, R, f);
    DS_CU_LAUNCHED(ctx, "colsum phase 1");
    ds_cu_colsum2_phase2<0><<<(C + 255) / 256, 256, 0, ctx->stream>>>(dst0, dst1, partials, P, C);
    DS_CU_LAUNCHED(ctx, "colsum phase 2");
    return 0;
}

#endif
