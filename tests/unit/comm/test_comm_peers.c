/* What a communicator's ranks tell each other through the store (comm_peers.c, used by
 * the NCCL backend), run here without a GPU: rank 0's value reaches every rank, a fresh
 * one per attempt; a rank 0 that cannot make it stops the others at once with its
 * message instead of leaving them waiting out the timeout; the first failure published
 * is the one every rank reports. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "comm_backend.h"
#include "comm_test_util.h"

#define ID_LEN 128
#define LONG_TIMEOUT_MS 60000 /* the ranks' alarm (20 s) fires long before this */

static int make_pattern(void *val, size_t len, ds_err *err) {
    (void)err;
    unsigned char *b = val;
    for (size_t i = 0; i < len; i++) b[i] = (unsigned char)(i * 7 + 3);
    return 0;
}

static int make_other(void *val, size_t len, ds_err *err) {
    (void)err;
    memset(val, 0xa5, len);
    return 0;
}

static int make_fails(void *val, size_t len, ds_err *err) {
    (void)val, (void)len;
    return ds_err_set(err, "ncclGetUniqueId: no id today");
}

static ds_comm_peers peers_of(rank_env *env, const char *prefix) {
    ds_comm_join j = {.rank = env->ctx.rank, .world = env->ctx.world_size,
                      .store = env->ctx.store, .prefix = prefix, .node_addr = "127.0.0.1",
                      .timeout_ms = LONG_TIMEOUT_MS};
    ds_comm_peers p;
    ds_comm_peers_init(&p, &j);
    return p;
}

static int share_rank(rank_env *env) {
    ds_err err = {{0}};
    unsigned char got[ID_LEN], want[ID_LEN];
    /* two attempts: each has its own value under its own prefix */
    const char *prefixes[2] = {"comm/0/0/", "comm/1/0/"};
    int (*makers[2])(void *, size_t, ds_err *) = {make_pattern, make_other};
    for (int a = 0; a < 2; a++) {
        ds_comm_peers p = peers_of(env, prefixes[a]);
        memset(got, 0, sizeof got);
        RANK_CHECK(ds_comm_peers_share(&p, "nccl_id", got, sizeof got, makers[a],
                                       LONG_TIMEOUT_MS, &err) == 0, "attempt %d: %s", a, err.msg);
        makers[a](want, sizeof want, &err);
        RANK_CHECK(memcmp(got, want, sizeof got) == 0, "attempt %d: rank %d got another value",
                   a, env->ctx.rank);
        RANK_CHECK(ds_comm_peers_failed(&p, "op", &err) == 0, "no failure yet: %s", err.msg);
    }
    return 0;
}

static void test_share(void **state) {
    (void)state;
    assert_int_equal(run_ranks(3, 3, LONG_TIMEOUT_MS, 20, share_rank, NULL), 0);
}

static int failing_rank0(rank_env *env) {
    ds_err err = {{0}};
    unsigned char id[ID_LEN];
    ds_comm_peers p = peers_of(env, "comm/0/0/");
    int rc = ds_comm_peers_share(&p, "nccl_id", id, sizeof id, make_fails, LONG_TIMEOUT_MS, &err);
    RANK_CHECK(rc == -1, "rank %d: sharing went through", env->ctx.rank);
    if (env->ctx.rank == 0) {
        RANK_CHECK(strstr(err.msg, "no id today") != NULL, "rank 0: %s", err.msg);
        return 0;
    }
    RANK_CHECK(strstr(err.msg, "nccl_id: stopped: peer rank 0 (127.0.0.1): ncclGetUniqueId: "
                               "no id today") != NULL, "rank %d: %s", env->ctx.rank, err.msg);
    /* the next attempt is not touched by this one's failure */
    ds_comm_peers next = peers_of(env, "comm/1/0/");
    RANK_CHECK(ds_comm_peers_failed(&next, "op", &err) == 0, "attempt 1 saw attempt 0's failure");
    return 0;
}

static void test_rank0_failure_stops_the_others(void **state) {
    (void)state;
    assert_int_equal(run_ranks(3, 3, LONG_TIMEOUT_MS, 20, failing_rank0, NULL), 0);
}

static int first_failure_rank(rank_env *env) {
    ds_err err = {{0}};
    ds_comm_peers p = peers_of(env, "comm/0/0/");
    if (env->ctx.rank == 1) ds_comm_peers_publish(&p, "ncclCommInitRankConfig: Duplicate GPU");
    RANK_CHECK(ds_store_barrier(env->ctx.store, "published", env->ctx.rank, env->ctx.world_size,
                                10000, &err) == 0, "%s", err.msg);
    if (env->ctx.rank == 0) ds_comm_peers_publish(&p, "nccl op: timed out"); /* a consequence */
    RANK_CHECK(ds_store_barrier(env->ctx.store, "again", env->ctx.rank, env->ctx.world_size,
                                10000, &err) == 0, "%s", err.msg);
    RANK_CHECK(ds_comm_peers_failed(&p, "nccl op", &err) == 1, "rank %d saw no failure", env->ctx.rank);
    RANK_CHECK(!strcmp(err.msg, "nccl op: stopped: peer rank 1 (127.0.0.1): "
                                "ncclCommInitRankConfig: Duplicate GPU"),
               "rank %d: %s", env->ctx.rank, err.msg);
    return 0;
}

static void test_first_failure_wins(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, LONG_TIMEOUT_MS, 20, first_failure_rank, NULL), 0);
}

static void test_without_store(void **state) {
    (void)state;
    ds_comm_join j = {.rank = 0, .world = 1, .store = NULL, .prefix = "comm/0/0/",
                      .node_addr = "h", .timeout_ms = 10};
    ds_comm_peers p;
    ds_comm_peers_init(&p, &j);
    ds_comm_peers_publish(&p, "nobody hears this");
    ds_err err = {{0}};
    assert_int_equal(ds_comm_peers_failed(&p, "op", &err), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_rank0_failure_stops_the_others),
        cmocka_unit_test(test_first_failure_wins),
        cmocka_unit_test(test_without_store),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
