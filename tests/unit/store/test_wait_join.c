/* Identical waits of a node's ranks joined at the agent (runtime/agent/wait_join.c),
 * without sockets: who waits for which request at the store, who is answered, when a
 * request is cancelled, and which requests may not join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store_proto.h"
#include "wait_join.h"

typedef struct log {
    uint32_t sent[8];
    int32_t sent_timeout[8];
    int ns;
    uint32_t answered[16];
    uint8_t status[16];
    char body[16][16];
    int na;
    uint32_t cancelled[8];
    int nc;
} log;

static void on_answer(void *ctx, uint32_t tag, uint8_t status, const uint8_t *body, size_t n) {
    log *l = ctx;
    l->answered[l->na] = tag;
    l->status[l->na] = status;
    if (n) memcpy(l->body[l->na], body, n < 15 ? n : 15);
    l->body[l->na++][n < 15 ? n : 15] = 0;
}

static int on_send(void *ctx, uint32_t tag, uint8_t op, const uint8_t *body, size_t n) {
    log *l = ctx;
    assert_int_equal(op, DS_STORE_OP_GET);
    assert_true(n >= 4);
    l->sent_timeout[l->ns] = (int32_t)ds_load_u32(body);
    l->sent[l->ns++] = tag;
    return 0;
}

static void on_cancel(void *ctx, uint32_t tag) {
    log *l = ctx;
    l->cancelled[l->nc++] = tag;
}

/* A GET body: timeout, key. */
static int get(ds_wjoin *w, uint32_t tag, const char *key, int32_t timeout_ms, int64_t now) {
    uint8_t b[64];
    ds_store_u32(b, (uint32_t)timeout_ms);
    memcpy(b + 4, key, strlen(key));
    return ds_wjoin_request(w, tag, DS_STORE_OP_GET, b, 4 + strlen(key), now);
}

static ds_wjoin *joiner(log *l) {
    memset(l, 0, sizeof *l);
    ds_wjoin *w = ds_wjoin_new((ds_wjoin_ops){l, on_send, on_answer, on_cancel});
    assert_non_null(w);
    return w;
}

static void test_same_get_waits_once(void **state) {
    (void)state;
    log l;
    ds_wjoin *w = joiner(&l);
    assert_int_equal(get(w, 1, "a0/uid", -1, 0), 0); /* goes to the store */
    assert_int_equal(get(w, 2, "a0/uid", -1, 0), 1); /* waits for tag 1's answer */
    assert_int_equal(get(w, 3, "a0/uid", -1, 5), 1);
    assert_int_equal(get(w, 4, "a0/other", -1, 0), 0);
    assert_int_equal(ds_wjoin_count(w), 2);
    ds_wjoin_answer(w, 1, DS_STORE_OK, (const uint8_t *)"v", 1, 10);
    assert_int_equal(l.na, 2); /* tag 1 itself is answered by the store */
    assert_int_equal(l.answered[0], 2);
    assert_int_equal(l.answered[1], 3);
    assert_string_equal(l.body[1], "v");
    assert_int_equal(ds_wjoin_count(w), 1);
    assert_int_equal(get(w, 5, "a0/uid", -1, 10), 0); /* answered: a new one goes again */
    ds_wjoin_free(w);
}

/* Each keeps its own timeout: a joined one is told TIMEOUT at its own deadline, and when
 * the one at the store times out first, it goes again for those with time left. */
static void test_timeouts(void **state) {
    (void)state;
    log l;
    ds_wjoin *w = joiner(&l);
    assert_int_equal(get(w, 1, "k", 1000, 0), 0);
    assert_int_equal(get(w, 2, "k", 1500, 0), 1);  /* due at 1500 */
    assert_int_equal(get(w, 3, "k", 500, 100), 1); /* due at 600 */
    assert_int_equal(get(w, 4, "k", -1, 200), 1);  /* forever */
    assert_int_equal(ds_wjoin_expire(w, 599), 600);
    assert_int_equal(l.na, 0);
    assert_int_equal(ds_wjoin_expire(w, 600), 1500);
    assert_int_equal(l.na, 1);
    assert_int_equal(l.answered[0], 3);
    assert_int_equal(l.status[0], DS_STORE_TIMEOUT);
    ds_wjoin_answer(w, 1, DS_STORE_TIMEOUT, NULL, 0, 1000); /* tag 1's own timeout */
    assert_int_equal(l.na, 1);
    assert_int_equal(l.ns, 1); /* again, for the others */
    assert_true(l.sent[0] == 2 || l.sent[0] == 4);
    assert_int_equal(l.sent_timeout[0], l.sent[0] == 2 ? 500 : -1);
    assert_int_equal(ds_wjoin_count(w), 1);
    ds_wjoin_answer(w, l.sent[0], DS_STORE_OK, (const uint8_t *)"v", 1, 1200);
    assert_int_equal(l.na, 2); /* the other one; the one that went again is the store's to answer */
    assert_int_equal(l.answered[1], l.sent[0] == 2 ? 4 : 2);
    assert_int_equal(l.status[1], DS_STORE_OK);
    assert_int_equal(ds_wjoin_count(w), 0);
    ds_wjoin_free(w);
}

/* The rank that sent it goes: it stays at the store while others wait, and is
 * cancelled when the last one goes. */
static void test_gone(void **state) {
    (void)state;
    log l;
    ds_wjoin *w = joiner(&l);
    assert_int_equal(get(w, 1, "k", -1, 0), 0);
    assert_int_equal(ds_wjoin_gone(w, 1), 1); /* alone: cancel it, as without joining */
    assert_int_equal(ds_wjoin_count(w), 0);
    assert_int_equal(get(w, 2, "k", -1, 0), 0);
    assert_int_equal(get(w, 3, "k", -1, 0), 1);
    assert_int_equal(get(w, 4, "k", -1, 0), 1);
    assert_int_equal(ds_wjoin_gone(w, 2), 0); /* 3 and 4 still wait for it */
    assert_int_equal(ds_wjoin_gone(w, 3), 0);
    assert_int_equal(l.nc, 0);
    assert_int_equal(ds_wjoin_gone(w, 4), 0); /* the last: cancelled here */
    assert_int_equal(l.nc, 1);
    assert_int_equal(l.cancelled[0], 2);
    assert_int_equal(ds_wjoin_count(w), 0);
    assert_int_equal(ds_wjoin_gone(w, 9), 1); /* not a wait (a SET, say): cancel as before */
    ds_wjoin_free(w);
}

static void test_other_ops_and_waits(void **state) {
    (void)state;
    log l;
    ds_wjoin *w = joiner(&l);
    uint8_t b[64];
    ds_store_u32(b, 3);
    memcpy(b + 4, "key", 3);
    assert_int_equal(ds_wjoin_request(w, 1, DS_STORE_OP_SET, b, 7, 0), 0);
    assert_int_equal(ds_wjoin_request(w, 2, DS_STORE_OP_SET, b, 7, 0), 0);
    assert_int_equal(ds_wjoin_count(w), 0);
    /* WAIT: timeout, then the key list, which must match byte for byte. */
    ds_store_u32(b, (uint32_t)-1);
    ds_store_u32(b + 4, 1);
    ds_store_u32(b + 8, 3);
    memcpy(b + 12, "key", 3);
    assert_int_equal(ds_wjoin_request(w, 3, DS_STORE_OP_WAIT, b, 15, 0), 0);
    assert_int_equal(ds_wjoin_request(w, 4, DS_STORE_OP_WAIT, b, 15, 0), 1);
    assert_int_equal(get(w, 5, "key", -1, 0), 0); /* a GET of it is another request */
    ds_wjoin_answer(w, 3, DS_STORE_OK, NULL, 0, 0);
    assert_int_equal(l.na, 1);
    assert_int_equal(l.answered[0], 4);
    ds_wjoin_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_get_waits_once),
        cmocka_unit_test(test_timeouts),
        cmocka_unit_test(test_gone),
        cmocka_unit_test(test_other_ops_and_waits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
