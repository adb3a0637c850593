/* The node's half of a two-level barrier (runtime/agent/barrier_join.c), without
 * sockets: what goes to the store and what each rank is answered, for joined arrivals,
 * barriers it must not join, a rank numbered off this node, timeouts and ranks that go
 * away. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "barrier_join.h"
#include "store_proto.h"

typedef struct sent {
    uint32_t utag, world, n, ranks[8];
    int32_t timeout_ms;
    char name[64];
} sent;

typedef struct answered {
    uint32_t tag;
    uint8_t status;
} answered;

typedef struct log {
    sent s[8];
    int ns;
    answered a[16];
    int na;
} log;

static int on_send(void *ctx, uint32_t utag, const uint8_t *body, size_t n) {
    log *l = ctx;
    sent *s = &l->s[l->ns++];
    s->utag = utag;
    s->timeout_ms = (int32_t)ds_load_u32(body);
    s->world = ds_load_u32(body + 4);
    s->n = ds_load_u32(body + 8);
    for (uint32_t i = 0; i < s->n; i++) s->ranks[i] = ds_load_u32(body + 12 + 4 * i);
    size_t nlen = n - 12 - 4 * s->n;
    memcpy(s->name, body + 12 + 4 * s->n, nlen);
    s->name[nlen] = 0;
    return 0;
}

static void on_answer(void *ctx, uint32_t tag, uint8_t status, const uint8_t *body, size_t n) {
    (void)body;
    (void)n;
    log *l = ctx;
    l->a[l->na++] = (answered){tag, status};
}

/* A rank's BARRIER body: timeout, world, one rank, name. */
static size_t body_of(uint8_t *b, const char *name, uint32_t world, uint32_t rank, int32_t timeout_ms) {
    ds_store_u32(b, (uint32_t)timeout_ms);
    ds_store_u32(b + 4, world);
    ds_store_u32(b + 8, 1);
    ds_store_u32(b + 12, rank);
    memcpy(b + 16, name, strlen(name));
    return 16 + strlen(name);
}

static int arrive(ds_bjoin *j, uint32_t tag, const char *name, uint32_t world, uint32_t rank, int32_t timeout_ms,
                  int64_t now) {
    uint8_t b[128];
    return ds_bjoin_arrive(j, tag, b, body_of(b, name, world, rank, timeout_ms), now);
}

static ds_bjoin *node(log *l) {
    memset(l, 0, sizeof *l);
    static const int ranks[] = {2, 3, 4}; /* node 1 of a world of 8 */
    ds_bjoin *j = ds_bjoin_new(8, ranks, 3, (ds_bjoin_ops){l, on_send, on_answer});
    assert_non_null(j);
    return j;
}

static void test_node_arrives_once(void **state) {
    (void)state;
    log l;
    ds_bjoin *j = node(&l);
    assert_int_equal(arrive(j, 1, "a0/barrier/x", 8, 3, -1, 0), 1);
    assert_int_equal(arrive(j, 2, "a0/barrier/x", 8, 2, -1, 0), 1);
    assert_int_equal(l.ns, 0); /* held until the node's last rank */
    assert_int_equal(arrive(j, 3, "a0/barrier/x", 8, 4, -1, 0), 1);
    assert_int_equal(l.ns, 1);
    assert_true(l.s[0].utag & DS_BJOIN_TAG_BIT);
    assert_int_equal(l.s[0].world, 8);
    assert_int_equal(l.s[0].n, 3);
    assert_int_equal(l.s[0].ranks[0], 3);
    assert_int_equal(l.s[0].ranks[1], 2);
    assert_int_equal(l.s[0].ranks[2], 4);
    assert_int_equal(l.s[0].timeout_ms, -1);
    assert_string_equal(l.s[0].name, "a0/barrier/x");
    assert_int_equal(l.na, 0);
    ds_bjoin_answer(j, l.s[0].utag, DS_STORE_OK, NULL, 0);
    assert_int_equal(l.na, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(l.a[i].tag, (uint32_t)i + 1);
        assert_int_equal(l.a[i].status, DS_STORE_OK);
    }
    assert_int_equal(ds_bjoin_count(j), 0); /* forgotten once released */
    ds_bjoin_free(j);
}

static void test_not_joined(void **state) {
    (void)state;
    log l;
    ds_bjoin *j = node(&l);
    assert_int_equal(arrive(j, 1, "sub", 4, 2, -1, 0), 0); /* another world: a subset */
    uint8_t b[128];
    size_t n = body_of(b, "two", 8, 2, -1);
    ds_store_u32(b + 8, 2); /* two ranks in one request: not a rank's */
    assert_int_equal(ds_bjoin_arrive(j, 2, b, n, 0), 0);
    assert_int_equal(ds_bjoin_arrive(j, 3, b, 10, 0), 0); /* truncated: the store says so */
    assert_int_equal(l.ns, 0);
    assert_int_equal(ds_bjoin_count(j), 0);
    ds_bjoin_free(j);
}

/* A rank numbered off this node: the world is not numbered as the job's nodes are. */
static void test_foreign_rank_passes(void **state) {
    (void)state;
    log l;
    ds_bjoin *j = node(&l);
    assert_int_equal(arrive(j, 1, "p", 8, 2, -1, 0), 1);
    assert_int_equal(arrive(j, 2, "p", 8, 7, -1, 0), 0); /* goes on as it is */
    assert_int_equal(l.ns, 1);                            /* what was held went first */
    assert_int_equal(l.s[0].n, 1);
    assert_int_equal(l.s[0].ranks[0], 2);
    assert_int_equal(arrive(j, 3, "p", 8, 3, -1, 0), 0);
    ds_bjoin_answer(j, l.s[0].utag, DS_STORE_OK, NULL, 0);
    assert_int_equal(l.na, 1);
    assert_int_equal(l.a[0].tag, 1);
    assert_int_equal(ds_bjoin_count(j), 0); /* three arrivals on a node of three */
    ds_bjoin_free(j);
}

/* Timeouts: what the node holds goes to the store after half the timeout; the rank is
 * told TIMEOUT when its own is due. */
static void test_timeout_sends_then_answers(void **state) {
    (void)state;
    log l;
    ds_bjoin *j = node(&l);
    assert_int_equal(arrive(j, 1, "t", 8, 2, 100, 1000), 1);
    assert_int_equal(arrive(j, 2, "t", 8, 3, 500, 1000), 1);
    assert_int_equal(ds_bjoin_expire(j, 1049), 1050);
    assert_int_equal(l.ns + l.na, 0);
    assert_int_equal(ds_bjoin_expire(j, 1050), 1100);
    assert_int_equal(l.ns, 1);
    assert_int_equal(l.s[0].n, 2);
    assert_int_equal(l.s[0].timeout_ms, 450); /* what rank 3 has left */
    assert_int_equal(l.na, 0);
    assert_int_equal(ds_bjoin_expire(j, 1100), 1500);
    assert_int_equal(l.na, 1);
    assert_int_equal(l.a[0].tag, 1);
    assert_int_equal(l.a[0].status, DS_STORE_TIMEOUT);
    assert_int_equal(arrive(j, 3, "t", 8, 4, 500, 1200), 1); /* late: goes at once */
    assert_int_equal(l.ns, 2);
    assert_int_equal(l.s[1].n, 1);
    assert_int_equal(l.s[1].ranks[0], 4);
    ds_bjoin_answer(j, l.s[1].utag, DS_STORE_OK, NULL, 0);
    ds_bjoin_answer(j, l.s[0].utag, DS_STORE_OK, NULL, 0);
    assert_int_equal(l.na, 3);
    assert_int_equal(l.a[1].tag, 3);
    assert_int_equal(l.a[2].tag, 2);
    assert_int_equal(ds_bjoin_expire(j, 2000), -1);
    assert_int_equal(ds_bjoin_count(j), 0);
    ds_bjoin_free(j);
}

/* A rank that goes away while held: its arrival still counts, nobody answers it. */
static void test_gone_rank_still_counted(void **state) {
    (void)state;
    log l;
    ds_bjoin *j = node(&l);
    assert_int_equal(arrive(j, 1, "g", 8, 2, -1, 0), 1);
    assert_int_equal(ds_bjoin_gone(j, 1), 1);
    assert_int_equal(ds_bjoin_gone(j, 9), 0);
    assert_int_equal(arrive(j, 2, "g", 8, 3, -1, 0), 1);
    assert_int_equal(arrive(j, 3, "g", 8, 4, -1, 0), 1);
    assert_int_equal(l.ns, 1);
    assert_int_equal(l.s[0].n, 3);
    ds_bjoin_answer(j, l.s[0].utag, DS_STORE_ERROR, (const uint8_t *)"x", 1);
    assert_int_equal(l.na, 2);
    assert_int_equal(l.a[0].tag, 2);
    assert_int_equal(l.a[0].status, DS_STORE_ERROR);
    assert_int_equal(ds_bjoin_count(j), 0);
    ds_bjoin_free(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_node_arrives_once),
        cmocka_unit_test(test_not_joined),
        cmocka_unit_test(test_foreign_rank_passes),
        cmocka_unit_test(test_timeout_sends_then_answers),
        cmocka_unit_test(test_gone_rank_still_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
