/* The NCCL backend on a machine with GPUs (label "gpu"; exits 77, a skip, without one):
 * every op on device buffers (reductions in fp32, bf16 and fp16), exact against a
 * reference sum, sync and async, with one rank per GPU (up to 2; a single GPU runs a
 * world of one through NCCL all the same). Each rank runs on the cuda device
 * (kernels/device.h): buffers come from its allocator and its copies, and a kernel
 * queued on its compute stream right before an op must be seen by the op, and one queued
 * right after ds_comm_wait (which only makes the compute stream wait) sees its result.
 * With two GPUs, a peer's published failure stops a rank blocked on the device.
 * CUDA is never touched in the parent: a process that initialised CUDA cannot fork
 * children that use it, so even the device count comes from a probe child. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "comm_test_util.h"
#include "device.h"
#include "kernels.h"
#include "tensor_half.h"

static float fill(int r, size_t i) { return (float)(int)((i * 7 + (size_t)r * 13) % 2001) - 1000.0f; }

static void *dev_alloc(size_t bytes) {
    ds_err err = {{0}};
    void *d = ds_device_get()->ops->alloc(ds_device_get(), bytes, &err);
    RANK_CHECK(d != NULL, "alloc: %s", err.msg);
    return d;
}

static void up(void *d, const void *h, size_t bytes) {
    ds_err err = {{0}};
    RANK_CHECK(ds_device_get()->ops->from_host(ds_device_get(), d, h, bytes, &err) == 0, "%s", err.msg);
}

static void down(void *h, const void *d, size_t bytes) {
    ds_err err = {{0}};
    RANK_CHECK(ds_device_get()->ops->to_host(ds_device_get(), h, d, bytes, &err) == 0, "%s", err.msg);
}

static float *to_device(const float *h, size_t n) {
    void *d = dev_alloc(n * sizeof(float) + 4);
    if (h) up(d, h, n * sizeof(float));
    return d;
}

static float *to_host(const float *d, size_t n) {
    float *h = malloc(n * sizeof(float) + 4);
    RANK_CHECK(h != NULL, "out of memory");
    down(h, d, n * sizeof(float));
    return h;
}

/* bf16 and fp16 all-reduce, SUM and AVG, on integers in [-32, 32]: every partial sum
 * (and its average over 1 or 2 ranks) is exact in 16 bits, so any order NCCL picks
 * gives the reference's bits. */
static float small_int(int r, size_t i) {
    return (float)(int)((i * 7 + (size_t)r * 13) % 65) - 32.0f;
}

static void check_half_allreduce(ds_comm *c, int rank, int world, ds_dtype dt) {
    const size_t n = 1000003;
    ds_half hf = ds_half_of(dt);
    float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *want);
    uint16_t *h = malloc(n * 2), *w16 = malloc(n * 2);
    RANK_CHECK(x && want && h && w16, "out of memory");
    void *d = dev_alloc(n * 2);
    for (int op = 0; op < 2; op++) {
        for (size_t i = 0; i < n; i++) {
            x[i] = small_int(rank, i);
            want[i] = 0;
            for (int q = 0; q < world; q++) want[i] += small_int(q, i);
            if (op == 1) want[i] /= (float)world;
        }
        ds_half_from_f32(hf, h, x, n);
        ds_half_from_f32(hf, w16, want, n);
        up(d, h, n * 2);
        ds_err err = {{0}};
        RANK_CHECK(ds_comm_allreduce(c, d, n, dt, op ? DS_COMM_AVG : DS_COMM_SUM, &err) == 0,
                   "%s", err.msg);
        down(h, d, n * 2);
        for (size_t i = 0; i < n; i++)
            RANK_CHECK(h[i] == w16[i], "%s allreduce op %d i=%zu", ds_dtype_name(dt), op, i);
    }
    ds_device_get()->ops->free(ds_device_get(), d, n * 2);
    free(x);
    free(want);
    free(h);
    free(w16);
}

static int nccl_rank(rank_env *env) {
    int rank = env->ctx.rank, world = env->ctx.world_size;
    ds_err err = {{0}};
    RANK_CHECK(ds_device_open("cuda", rank, &err) == 0, "%s", err.msg);
    ds_comm_opts o = {.backend = DS_COMM_NCCL, .timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c != NULL, "open: %s", err.msg);
    RANK_CHECK(ds_comm_backend_of(c) == DS_COMM_NCCL, "backend");
    const size_t n = 1000003, shard = 250007;
    float *h = malloc(n * sizeof(float)), *full = malloc(shard * (size_t)world * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = fill(rank, i);

    /* all-reduce of what a kernel on the compute stream wrote just before: x2 */
    float *d = to_device(h, n);
    ds_device_get()->k->scale(d, 2.0f, n);
    RANK_CHECK(ds_comm_allreduce(c, d, n, DS_F32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    float *r = to_host(d, n);
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < world; q++) want += 2.0f * fill(q, i);
        RANK_CHECK(r[i] == want, "allreduce after a kernel on the compute stream i=%zu", i);
    }
    free(r);

    /* reduce-scatter (async) */
    for (size_t i = 0; i < shard * (size_t)world; i++) full[i] = fill(rank, i);
    float *din = to_device(full, shard * (size_t)world), *dout = to_device(NULL, shard);
    ds_comm_handle *hd = ds_comm_ireduce_scatter(c, din, dout, shard, DS_F32, DS_COMM_SUM, &err);
    RANK_CHECK(hd != NULL, "%s", err.msg);
    RANK_CHECK(ds_comm_wait(hd, &err) == 0, "%s", err.msg);
    /* the wait only made the compute stream wait: a kernel queued now sees the result */
    ds_device_get()->k->scale(dout, 3.0f, shard);
    r = to_host(dout, shard);
    for (size_t k = 0; k < shard; k++) {
        float want = 0;
        for (int q = 0; q < world; q++) want += fill(q, (size_t)rank * shard + k);
        RANK_CHECK(r[k] == 3.0f * want, "reduce-scatter, then a kernel after the wait k=%zu", k);
    }
    free(r);

    /* all-gather of a 16-bit payload, in place */
    uint16_t *hg = malloc(shard * (size_t)world * 2);
    for (size_t k = 0; k < shard; k++) hg[(size_t)rank * shard + k] = (uint16_t)(rank * 1000 + k);
    void *dg = dev_alloc(shard * (size_t)world * 2);
    up(dg, hg, shard * (size_t)world * 2);
    RANK_CHECK(ds_comm_allgather(c, (uint16_t *)dg + (size_t)rank * shard, dg, shard, DS_BF16,
                                 &err) == 0, "%s", err.msg);
    down(hg, dg, shard * (size_t)world * 2);
    for (int q = 0; q < world; q++)
        for (size_t k = 0; k < shard; k++)
            RANK_CHECK(hg[(size_t)q * shard + k] == (uint16_t)(q * 1000 + k), "allgather");

    check_half_allreduce(c, rank, world, DS_BF16);
    check_half_allreduce(c, rank, world, DS_F16);

    /* broadcast from the last rank, barrier */
    up(d, h, n * sizeof(float));
    RANK_CHECK(ds_comm_broadcast(c, d, n, DS_F32, world - 1, &err) == 0, "%s", err.msg);
    r = to_host(d, n);
    for (size_t i = 0; i < n; i++) RANK_CHECK(r[i] == fill(world - 1, i), "broadcast i=%zu", i);
    free(r);
    RANK_CHECK(ds_comm_barrier(c, &err) == 0, "%s", err.msg);

    ds_device *dev = ds_device_get();
    dev->ops->free(dev, d, n * sizeof(float) + 4);
    dev->ops->free(dev, din, shard * (size_t)world * sizeof(float) + 4);
    dev->ops->free(dev, dout, shard * sizeof(float) + 4);
    dev->ops->free(dev, dg, shard * (size_t)world * 2);
    free(h);
    free(full);
    free(hg);
    ds_comm_close(c);
    return 0;
}

/* A peer that published its failure stops this rank's collective while the host is
 * blocked on the device (its read after a ds_comm_wait that only ordered the stream),
 * long before the timeout, with the peer's message; later ops are refused. Rank 1
 * publishes as comm_peers.c does and never joins the all-reduce. Needs two GPUs. */
static int peer_fails_rank(rank_env *env) {
    int rank = env->ctx.rank;
    ds_err err = {{0}};
    RANK_CHECK(ds_device_open("cuda", rank, &err) == 0, "%s", err.msg);
    ds_comm_opts o = {.backend = DS_COMM_NCCL, .timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c != NULL, "open: %s", err.msg);
    const size_t n = 1 << 20;
    float *d = to_device(NULL, n);
    if (rank == 1) {
        const char *why = "rank 1 (127.0.0.1): gave up on purpose";
        RANK_CHECK(ds_store_set(env->ctx.store, "comm/0/0/failed", why, strlen(why), &err) == 0,
                   "%s", err.msg); /* the first open of this process, attempt 0 */
        void *v = NULL;
        size_t len = 0;
        RANK_CHECK(ds_store_get(env->ctx.store, "rank0_done", &v, &len, 200000, &err) == 0, "%s",
                   err.msg);
        free(v);
        _exit(0); /* its communicator ends with the process */
    }
    double t0 = now_s();
    ds_comm_handle *h = ds_comm_iallreduce(c, d, n, DS_F32, DS_COMM_SUM, &err);
    RANK_CHECK(h != NULL, "%s", err.msg);
    RANK_CHECK(ds_comm_wait(h, &err) == 0, "the wait must not block: %s", err.msg);
    float x = 0;
    int rc = ds_device_get()->ops->to_host(ds_device_get(), &x, d, sizeof x, &err);
    double dt = now_s() - t0;
    RANK_CHECK(rc != 0, "read after an all-reduce a peer never joined: no error");
    RANK_CHECK(strstr(err.msg, "nccl op: stopped: peer rank 1 (127.0.0.1): gave up on purpose"),
               "%s", err.msg);
    RANK_CHECK(dt < 0.5 * env->timeout_ms / 1000.0, "stopped after %.1f s", dt);
    RANK_CHECK(ds_comm_barrier(c, &err) != 0 && strstr(err.msg, "aborted"), "%s", err.msg);
    RANK_CHECK(ds_store_set(env->ctx.store, "rank0_done", "1", 1, &err) == 0, "%s", err.msg);
    ds_comm_close(c);
    return 0;
}

/* A rank on cpu asking for NCCL, in a program with the CUDA backend linked in: comm's
 * error, NCCL never called. */
static int nccl_on_cpu_rank(rank_env *env) {
    ds_err err = {{0}};
    ds_comm_opts o = {.backend = DS_COMM_NCCL, .timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(!c && strstr(err.msg, "nccl: no CUDA device: this rank runs on cpu"), "got %s",
               c ? "a communicator" : err.msg);
    return 0;
}

/* The number of CUDA devices, asked in a child so this process never initialises CUDA. */
static int probe_devices(void) {
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
        _exit(n > 100 ? 100 : n);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 0;
    return WEXITSTATUS(st);
}

int main(void) {
    int failed = run_ranks(1, 1, 5000, 30, nccl_on_cpu_rank, NULL);
    printf("nccl asked on a cpu rank: %s\n", failed ? "FAILED" : "passed");
    int ndev = probe_devices();
    if (ndev == 0) {
        printf("no CUDA device: skipped\n");
        return failed ? 1 : 77;
    }
    int world = ndev >= 2 ? 2 : 1;
    failed += run_ranks(world, world, 60000, 240, nccl_rank, NULL);
    printf("nccl, world %d: %s\n", world, failed ? "FAILED" : "passed");
    if (world == 2) {
        int f2 = run_ranks(2, 2, 120000, 240, peer_fails_rank, NULL);
        printf("nccl, a peer's failure while the host waits on the device: %s\n",
               f2 ? "FAILED" : "passed");
        failed += f2;
    }
    return failed ? 1 : 0;
}
