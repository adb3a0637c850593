/* The communicator over real processes: every op at world 2 and 4 with uneven sizes,
 * checked exactly against a reference sum; async overlap; determinism; a rank that
 * never arrives; a peer dying mid-op; a world of one; bad arguments. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "comm_test_util.h"

/* Integer-valued floats in [-1000, 1000]: any order of summation over a few ranks is
 * exact, so results compare with ==. */
static float fill(int r, size_t i) {
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(r + 1) * 40503u;
    return (float)(int)(h % 2001u) - 1000.0f;
}

static float ref_sum(int world, size_t i) {
    float s = 0;
    for (int r = 0; r < world; r++) s += fill(r, i);
    return s;
}

static float *make_buf(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    RANK_CHECK(p != NULL, "out of memory");
    return p;
}

/* ---- every op, exact ---- */

static void check_allreduce(ds_comm *c, int rank, int world, size_t n) {
    ds_err err = {{0}};
    float *b = make_buf(n);
    for (size_t i = 0; i < n; i++) b[i] = fill(rank, i);
    RANK_CHECK(ds_comm_allreduce(c, b, n, DS_F32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++)
        RANK_CHECK(b[i] == ref_sum(world, i), "allreduce n=%zu i=%zu: %g != %g", n, i, b[i],
                   ref_sum(world, i));
    for (size_t i = 0; i < n; i++) b[i] = fill(rank, i);
    RANK_CHECK(ds_comm_allreduce(c, b, n, DS_F32, DS_COMM_AVG, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++)
        RANK_CHECK(b[i] == ref_sum(world, i) / (float)world, "avg n=%zu i=%zu", n, i);
    free(b);
}

static void check_reduce_scatter(ds_comm *c, int rank, int world, size_t shard, int in_place) {
    ds_err err = {{0}};
    size_t n = shard * (size_t)world;
    float *in = make_buf(n), *out = in_place ? in + (size_t)rank * shard : make_buf(shard);
    for (size_t i = 0; i < n; i++) in[i] = fill(rank, i);
    RANK_CHECK(ds_comm_reduce_scatter(c, in, out, shard, DS_F32, DS_COMM_SUM, &err) == 0, "%s",
               err.msg);
    for (size_t k = 0; k < shard; k++) {
        size_t i = (size_t)rank * shard + k;
        RANK_CHECK(out[k] == ref_sum(world, i), "reduce-scatter shard=%zu k=%zu: %g != %g",
                   shard, k, out[k], ref_sum(world, i));
    }
    if (!in_place) free(out);
    free(in);
}

static void check_allgather(ds_comm *c, int rank, int world, size_t shard, int in_place) {
    ds_err err = {{0}};
    size_t n = shard * (size_t)world;
    float *out = make_buf(n), *in = in_place ? out + (size_t)rank * shard : make_buf(shard);
    for (size_t k = 0; k < shard; k++) in[k] = fill(rank, k);
    RANK_CHECK(ds_comm_allgather(c, in, out, shard, DS_F32, &err) == 0, "%s", err.msg);
    for (int r = 0; r < world; r++)
        for (size_t k = 0; k < shard; k++)
            RANK_CHECK(out[(size_t)r * shard + k] == fill(r, k), "allgather r=%d k=%zu", r, k);
    if (!in_place) free(in);
    free(out);
}

/* 16-bit working copies travel as raw payloads. */
static void check_allgather_u16(ds_comm *c, int rank, int world, size_t shard) {
    ds_err err = {{0}};
    uint16_t *in = malloc(shard * 2 + 2), *out = malloc(shard * 2 * (size_t)world + 2);
    for (size_t k = 0; k < shard; k++) in[k] = (uint16_t)(rank * 7919 + k * 31);
    RANK_CHECK(ds_comm_allgather(c, in, out, shard, DS_BF16, &err) == 0, "%s", err.msg);
    for (int r = 0; r < world; r++)
        for (size_t k = 0; k < shard; k++)
            RANK_CHECK(out[(size_t)r * shard + k] == (uint16_t)(r * 7919 + k * 31), "bf16 gather");
    free(in);
    free(out);
}

static void check_broadcast(ds_comm *c, int rank, int world, size_t n) {
    ds_err err = {{0}};
    int root = world - 1;
    float *b = make_buf(n);
    for (size_t i = 0; i < n; i++) b[i] = fill(rank, i);
    RANK_CHECK(ds_comm_broadcast(c, b, n, DS_F32, root, &err) == 0, "%s", err.msg);
    for (size_t i = 0; i < n; i++) RANK_CHECK(b[i] == fill(root, i), "broadcast i=%zu", i);
    free(b);
}

static void check_i32(ds_comm *c, int rank, int world) {
    ds_err err = {{0}};
    int32_t v[3] = {rank, 1, -rank * 1000};
    RANK_CHECK(ds_comm_allreduce(c, v, 3, DS_I32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    RANK_CHECK(v[0] == world * (world - 1) / 2 && v[1] == world &&
                   v[2] == -1000 * world * (world - 1) / 2, "i32 allreduce");
}

static int all_ops_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int rank = env->ctx.rank, world = env->ctx.world_size;
    ds_err err = {{0}};
    RANK_CHECK(ds_comm_rank(c) == rank && ds_comm_size(c) == world, "rank/size");
    RANK_CHECK(ds_comm_backend_of(c) == DS_COMM_GLOO, "backend");
    static const size_t sizes[] = {0, 1, 7, 1001, 300007};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        check_allreduce(c, rank, world, sizes[s]);
        check_reduce_scatter(c, rank, world, sizes[s], 0);
        check_reduce_scatter(c, rank, world, sizes[s], 1);
        check_allgather(c, rank, world, sizes[s], 0);
        check_allgather(c, rank, world, sizes[s], 1);
        check_allgather_u16(c, rank, world, sizes[s]);
        check_broadcast(c, rank, world, sizes[s]);
    }
    /* more 1 MiB segments per ring step than the 4-segment scratch ring holds */
    check_reduce_scatter(c, rank, world, 1500007, 0);
    check_i32(c, rank, world);
    RANK_CHECK(ds_comm_barrier(c, &err) == 0, "%s", err.msg);
    ds_comm_close(c);
    return 0;
}

static void test_all_ops_world2(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 20000, 60, all_ops_rank, NULL), 0);
}

static void test_all_ops_world4(void **state) {
    (void)state;
    assert_int_equal(run_ranks(4, 4, 20000, 60, all_ops_rank, NULL), 0);
}

/* ---- async: the issuing call returns before the peers have even started ---- */

static int async_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int rank = env->ctx.rank, world = env->ctx.world_size;
    ds_err err = {{0}};
    size_t n = 1 << 20, shard = 4099, rs = 300007;
    float *a = make_buf(n), *g = make_buf(shard * (size_t)world), *s = make_buf(shard);
    float *full = make_buf(rs * (size_t)world), *mine = make_buf(rs);
    for (size_t i = 0; i < n; i++) a[i] = fill(rank, i);
    for (size_t i = 0; i < rs * (size_t)world; i++) full[i] = fill(rank, i);
    for (size_t k = 0; k < shard; k++) s[k] = fill(rank, k);
    if (rank == 0) {
        /* Rank 1 joins only once rank 0 holds both handles: a blocking issue would
         * never return and the test would time out. */
        ds_comm_handle *h1 = ds_comm_iallreduce(c, a, n, DS_F32, DS_COMM_SUM, &err);
        RANK_CHECK(h1 != NULL, "%s", err.msg);
        ds_comm_handle *h2 = ds_comm_iallgather(c, s, g, shard, DS_F32, &err);
        RANK_CHECK(h2 != NULL, "%s", err.msg);
        ds_comm_handle *h3 = ds_comm_ireduce_scatter(c, full, mine, rs, DS_F32, DS_COMM_SUM, &err);
        RANK_CHECK(h3 != NULL, "%s", err.msg);
        RANK_CHECK(ds_comm_done(h1) == 0, "allreduce done before its peers started");
        RANK_CHECK(ds_store_set(env->ctx.store, "issued", "1", 1, &err) == 0, "%s", err.msg);
        double acc = 0; /* compute while the ops run */
        for (size_t i = 0; i < n; i++) acc += (double)(i % 7) * 0.5;
        RANK_CHECK(acc > 0, "compute");
        RANK_CHECK(ds_comm_wait(h1, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_comm_wait(h2, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_comm_wait(h3, &err) == 0, "%s", err.msg);
    } else {
        void *v = NULL;
        size_t len = 0;
        RANK_CHECK(ds_store_get(env->ctx.store, "issued", &v, &len, 20000, &err) == 0, "%s",
                   err.msg);
        free(v);
        RANK_CHECK(ds_comm_allreduce(c, a, n, DS_F32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
        ds_comm_handle *h2 = ds_comm_iallgather(c, s, g, shard, DS_F32, &err);
        RANK_CHECK(h2 != NULL, "%s", err.msg);
        RANK_CHECK(ds_comm_wait(h2, &err) == 0, "%s", err.msg);
        RANK_CHECK(ds_comm_reduce_scatter(c, full, mine, rs, DS_F32, DS_COMM_SUM, &err) == 0,
                   "%s", err.msg);
    }
    for (size_t i = 0; i < n; i++) RANK_CHECK(a[i] == ref_sum(world, i), "async allreduce");
    for (size_t k = 0; k < rs; k++)
        RANK_CHECK(mine[k] == ref_sum(world, (size_t)rank * rs + k), "async reduce-scatter");
    for (int r = 0; r < world; r++)
        for (size_t k = 0; k < shard; k++)
            RANK_CHECK(g[(size_t)r * shard + k] == fill(r, k), "async allgather");
    free(a);
    free(g);
    free(s);
    free(full);
    free(mine);
    ds_comm_close(c);
    return 0;
}

static void test_async_overlap(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 20000, 60, async_rank, NULL), 0);
}

/* ---- determinism: non-integer data, same bits on every rank and every run ---- */

#define DET_N 200003
#define DET_SHARD 50001

typedef struct det_out {
    uint32_t allreduce[4][DET_N];
    uint32_t shard[4][DET_SHARD];
} det_out;

static float noisy(int r, size_t i) { return sinf((float)i * 0.37f + (float)r) * 1e3f / (float)(i % 97 + 1); }

static int det_rank(rank_env *env) {
    det_out *out = env->arg;
    ds_comm *c = rank_open(env);
    int rank = env->ctx.rank, world = env->ctx.world_size;
    ds_err err = {{0}};
    float *a = make_buf(DET_N), *in = make_buf((size_t)DET_SHARD * (size_t)world);
    for (size_t i = 0; i < DET_N; i++) a[i] = noisy(rank, i);
    for (size_t i = 0; i < (size_t)DET_SHARD * (size_t)world; i++) in[i] = noisy(rank, i);
    RANK_CHECK(ds_comm_allreduce(c, a, DET_N, DS_F32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    RANK_CHECK(ds_comm_reduce_scatter(c, in, in + (size_t)rank * DET_SHARD, DET_SHARD, DS_F32,
                                      DS_COMM_AVG, &err) == 0, "%s", err.msg);
    memcpy(out->allreduce[rank], a, sizeof out->allreduce[rank]);
    memcpy(out->shard[rank], in + (size_t)rank * DET_SHARD, sizeof out->shard[rank]);
    free(a);
    free(in);
    ds_comm_close(c);
    return 0;
}

static void test_determinism(void **state) {
    (void)state;
    const int world = 4;
    det_out *runs = mmap(NULL, 2 * sizeof(det_out), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(runs != MAP_FAILED);
    for (int k = 0; k < 2; k++)
        assert_int_equal(run_ranks(world, world, 20000, 60, det_rank, &runs[k]), 0);
    for (int r = 0; r < world; r++) {
        /* the same bits on every rank ... */
        assert_memory_equal(runs[0].allreduce[r], runs[0].allreduce[0], sizeof runs[0].allreduce[0]);
        /* ... and in both runs */
        assert_memory_equal(runs[1].allreduce[r], runs[0].allreduce[r], sizeof runs[0].allreduce[0]);
        assert_memory_equal(runs[1].shard[r], runs[0].shard[r], sizeof runs[0].shard[0]);
    }
    munmap(runs, 2 * sizeof(det_out));
}

/* ---- a rank that never arrives ---- */

static int missing_rank(rank_env *env) {
    ds_err err = {{0}};
    ds_comm_opts o = {.timeout_ms = env->timeout_ms};
    double t0 = now_s();
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    double dt = now_s() - t0;
    RANK_CHECK(c == NULL, "open succeeded without rank 2");
    fprintf(stderr, "rank %d got, as expected: %s\n", env->ctx.rank, err.msg);
    RANK_CHECK(strstr(err.msg, "never arrived: 2") != NULL, "message: %s", err.msg);
    RANK_CHECK(strstr(err.msg, "1 of 3") != NULL, "message: %s", err.msg);
    RANK_CHECK(dt < env->timeout_ms / 1000.0 + 2.0, "took %.1f s", dt);
    return 0;
}

static void test_missing_rank(void **state) {
    (void)state;
    assert_int_equal(run_ranks(3, 2, 1000, 30, missing_rank, NULL), 0);
}

/* ---- a peer dies in the middle of an op ---- */

static int dying_peer_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int rank = env->ctx.rank;
    ds_err err = {{0}};
    size_t n = 16u << 20;
    float *a = make_buf(n);
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    RANK_CHECK(ds_comm_barrier(c, &err) == 0, "%s", err.msg);
    if (rank == 1) {
        ds_comm_handle *h = ds_comm_iallreduce(c, a, n, DS_F32, DS_COMM_SUM, &err);
        RANK_CHECK(h != NULL, "%s", err.msg);
        raise(SIGKILL); /* mid-op: the survivor must get an error, not SIGPIPE */
    }
    double t0 = now_s();
    int rc = ds_comm_allreduce(c, a, n, DS_F32, DS_COMM_SUM, &err);
    RANK_CHECK(rc == -1, "allreduce with a dead peer succeeded");
    fprintf(stderr, "rank 0 got, as expected, after %.3f s: %s\n", now_s() - t0, err.msg);
    RANK_CHECK(strstr(err.msg, "rank 0 of 2") != NULL, "message: %s", err.msg);
    RANK_CHECK(now_s() - t0 < env->timeout_ms / 1000.0 + 2.0, "error came late");
    /* broken now: later ops fail at once, with the first error */
    RANK_CHECK(ds_comm_barrier(c, &err) == -1, "barrier on a broken communicator");
    RANK_CHECK(strstr(err.msg, "broke earlier") != NULL, "message: %s", err.msg);
    free(a);
    ds_comm_close(c);
    return 0;
}

static void test_dying_peer(void **state) {
    (void)state;
    /* rank 1 is expected to die of SIGKILL: exactly one failure, and it is rank 1's */
    assert_int_equal(run_ranks(2, 2, 10000, 60, dying_peer_rank, NULL), 1);
}

/* Ops issued before the communicator broke are waited without an error buffer, as a
 * finalizer does (ZeRO-3's prefetched gather, freed while the Lua state closes after a
 * peer died): each wait fails, none may crash (it dereferenced the NULL buffer). */
static int wait_without_err_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int rank = env->ctx.rank;
    ds_err err = {{0}};
    size_t n = 1u << 20;
    float *a = make_buf(n), *b = make_buf(n);
    RANK_CHECK(ds_comm_barrier(c, &err) == 0, "%s", err.msg);
    if (rank == 1) { /* dies once rank 0 has both ops in flight */
        void *v;
        size_t len;
        RANK_CHECK(ds_store_get(env->ctx.store, "issued", &v, &len, 10000, &err) == 0, "%s", err.msg);
        raise(SIGKILL);
    }
    ds_comm_handle *h1 = ds_comm_iallreduce(c, a, n, DS_F32, DS_COMM_SUM, &err);
    ds_comm_handle *h2 = ds_comm_iallgather(c, b, a, n / 2, DS_F32, &err);
    RANK_CHECK(h1 && h2, "issue: %s", err.msg);
    RANK_CHECK(ds_store_set(env->ctx.store, "issued", "1", 1, &err) == 0, "%s", err.msg);
    RANK_CHECK(ds_comm_wait(h1, NULL) == -1, "the first op succeeded with a dead peer");
    RANK_CHECK(ds_comm_wait(h2, NULL) == -1, "the op after it succeeded");
    RANK_CHECK(ds_comm_allreduce(c, a, 1, DS_F32, DS_COMM_SUM, NULL) == -1, "a sync op on a broken communicator");
    free(a);
    free(b);
    ds_comm_close(c);
    return 0;
}

static void test_wait_without_err(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 10000, 60, wait_without_err_rank, NULL), 1); /* rank 1's SIGKILL */
}

/* ---- the node's own address ---- */

/* Each rank as if on its own node: 127.0.0.2, 127.0.0.3 (DS_NODE_ADDR wins over ctx->host). */
static int node_addr_rank(rank_env *env) {
    char addr[32];
    snprintf(addr, sizeof addr, "127.0.0.%d", env->ctx.rank + 2);
    setenv("DS_NODE_ADDR", addr, 1);
    snprintf(env->ctx.host, sizeof env->ctx.host, "no.such.host.invalid");
    ds_comm *c = rank_open(env);
    ds_err err = {{0}};
    float v = 1.0f;
    RANK_CHECK(ds_comm_allreduce(c, &v, 1, DS_F32, DS_COMM_SUM, &err) == 0, "%s", err.msg);
    RANK_CHECK(v == 2.0f, "sum %g", v);
    ds_comm_close(c);
    return 0;
}

static void test_node_addr(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 10000, 30, node_addr_rank, NULL), 0);
}

/* An address that does not resolve fails every rank, naming it. */
static int bad_addr_rank(rank_env *env) {
    snprintf(env->ctx.host, sizeof env->ctx.host, "no.such.host.invalid");
    ds_err err = {{0}};
    ds_comm_opts o = {.timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c == NULL, "open with a bad address succeeded");
    RANK_CHECK(strstr(err.msg, "no.such.host.invalid") != NULL, "message: %s", err.msg);
    /* resolves, but is not this machine's: binding fails */
    snprintf(env->ctx.host, sizeof env->ctx.host, "192.0.2.1");
    c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c == NULL, "open with a foreign address succeeded");
    fprintf(stderr, "rank %d got, as expected: %s\n", env->ctx.rank, err.msg);
    RANK_CHECK(strstr(err.msg, "192.0.2.1") != NULL, "message: %s", err.msg);
    return 0;
}

/* Rank 1 arrives, then fails before connecting: rank 0's error names it. */
static int half_bad_rank(rank_env *env) {
    if (env->ctx.rank == 1) snprintf(env->ctx.host, sizeof env->ctx.host, "no.such.host.invalid");
    ds_err err = {{0}};
    ds_comm_opts o = {.timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c == NULL, "open succeeded");
    if (env->ctx.rank == 0)
        RANK_CHECK(strstr(err.msg, "rank 1 arrived but never published") != NULL, "message: %s",
                   err.msg);
    return 0;
}

static void test_rank_fails_after_arrival(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 1000, 30, half_bad_rank, NULL), 0);
}

static void test_bad_node_addr(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 3000, 30, bad_addr_rank, NULL), 0);
}

/* ---- a world of one and bad arguments ---- */

static void test_world_of_one(void **state) {
    (void)state;
    ds_context ctx;
    ds_context_single(&ctx);
    ds_err err = {{0}};
    ds_comm *c = ds_comm_open(&ctx, &err);
    assert_non_null(c);
    assert_int_equal(ds_comm_backend_of(c), DS_COMM_SELF);
    float b[5] = {1, 2, 3, 4, 5}, g[5] = {0};
    assert_int_equal(ds_comm_allreduce(c, b, 5, DS_F32, DS_COMM_AVG, &err), 0);
    assert_true(b[4] == 5.0f);
    assert_int_equal(ds_comm_reduce_scatter(c, b, g, 5, DS_F32, DS_COMM_SUM, &err), 0);
    assert_memory_equal(b, g, sizeof b);
    memset(g, 0, sizeof g);
    ds_comm_handle *h = ds_comm_iallgather(c, b, g, 5, DS_F32, &err);
    assert_non_null(h);
    assert_int_equal(ds_comm_done(h), 1);
    assert_int_equal(ds_comm_wait(h, &err), 0);
    assert_memory_equal(b, g, sizeof b);
    assert_int_equal(ds_comm_broadcast(c, b, 5, DS_F32, 0, &err), 0);
    assert_int_equal(ds_comm_barrier(c, &err), 0);

    /* bad arguments are errors, not crashes */
    assert_int_equal(ds_comm_broadcast(c, b, 5, DS_F32, 1, &err), -1);
    assert_non_null(strstr(err.msg, "root 1"));
    assert_int_equal(ds_comm_allreduce(c, b, 5, (ds_dtype)9, DS_COMM_SUM, &err), -1);
    assert_non_null(strstr(err.msg, "unknown dtype"));
    assert_int_equal(ds_comm_allreduce(c, b, 5, DS_I32, DS_COMM_AVG, &err), -1);
    assert_int_equal(ds_comm_allgather(c, NULL, g, 5, DS_F32, &err), -1);
    assert_int_equal(ds_comm_allgather(c, b, g, SIZE_MAX / 2, DS_F32, &err), -1);
    ds_comm_close(c);
}

static void test_open_errors(void **state) {
    (void)state;
    ds_context ctx;
    ds_context_single(&ctx);
    ds_err err = {{0}};
    ctx.world_size = 2; /* and no store */
    assert_null(ds_comm_open(&ctx, &err));
    assert_non_null(strstr(err.msg, "store"));
    ctx.rank = 2;
    assert_null(ds_comm_open(&ctx, &err));
    assert_non_null(strstr(err.msg, "rank 2"));
    ds_comm_opts o = {.backend = DS_COMM_SELF};
    ctx.rank = 0;
    assert_null(ds_comm_open_opts(&ctx, &o, &err));
    setenv("DS_COMM_BACKEND", "mpi", 1);
    assert_null(ds_comm_open(&ctx, &err));
    assert_non_null(strstr(err.msg, "DS_COMM_BACKEND=mpi"));
    unsetenv("DS_COMM_BACKEND");
}

#ifdef DS_HAVE_CUDA
/* Built with CUDA, run here without a GPU: asking for NCCL is a clean error. */
static int nccl_rank(rank_env *env) {
    ds_err err = {{0}};
    ds_comm_opts o = {.backend = DS_COMM_NCCL, .timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    if (c) { /* a machine with a GPU: a world of one over NCCL must work */
        ds_comm_close(c);
        return 0;
    }
    RANK_CHECK(strstr(err.msg, "no CUDA device") != NULL, "message: %s", err.msg);
    return 0;
}

static void test_nccl_without_gpu(void **state) {
    (void)state;
    assert_int_equal(run_ranks(1, 1, 5000, 30, nccl_rank, NULL), 0);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_all_ops_world2),
        cmocka_unit_test(test_all_ops_world4),
        cmocka_unit_test(test_async_overlap),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_missing_rank),
        cmocka_unit_test(test_dying_peer),
        cmocka_unit_test(test_wait_without_err),
        cmocka_unit_test(test_node_addr),
        cmocka_unit_test(test_bad_node_addr),
        cmocka_unit_test(test_rank_fails_after_arrival),
#ifdef DS_HAVE_CUDA
        cmocka_unit_test(test_nccl_without_gpu),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
