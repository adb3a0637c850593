/* The store server at scale: TAGGED requests (many outstanding on one connection, as an
 * agent multiplexes its ranks), CANCEL, waiters indexed by key, and the refusal of
 * connections over the limit with a message the client prints. */
#include <signal.h>

#include "store_test_util.h"

/* A TAGGED request: tag, op, body. */
static void send_tagged(int fd, uint32_t tag, uint8_t op, const ds_buf *body) {
    ds_buf b = {0};
    ds_frame_begin(&b, DS_STORE_OP_TAGGED);
    ds_buf_put_u32(&b, tag);
    ds_buf_put_u8(&b, op);
    if (body) ds_buf_put(&b, body->data, body->len);
    ds_frame_end(&b, 0);
    raw_send(fd, &b);
    ds_buf_free(&b);
}

static void send_get(int fd, uint32_t tag, const char *key, int32_t timeout_ms) {
    ds_buf b = {0};
    ds_buf_put_u32(&b, (uint32_t)timeout_ms);
    ds_buf_put(&b, key, strlen(key));
    send_tagged(fd, tag, DS_STORE_OP_GET, &b);
    ds_buf_free(&b);
}

static void send_set(int fd, uint32_t tag, const char *key, const char *val) {
    ds_buf b = {0};
    ds_buf_put_u32(&b, (uint32_t)strlen(key));
    ds_buf_put(&b, key, strlen(key));
    ds_buf_put(&b, val, strlen(val));
    send_tagged(fd, tag, DS_STORE_OP_SET, &b);
    ds_buf_free(&b);
}

static void send_wait(int fd, uint32_t tag, const char *k1, const char *k2, int32_t timeout_ms) {
    ds_buf b = {0};
    ds_buf_put_u32(&b, (uint32_t)timeout_ms);
    ds_buf_put_u32(&b, 2);
    ds_buf_put_u32(&b, (uint32_t)strlen(k1));
    ds_buf_put(&b, k1, strlen(k1));
    ds_buf_put_u32(&b, (uint32_t)strlen(k2));
    ds_buf_put(&b, k2, strlen(k2));
    send_tagged(fd, tag, DS_STORE_OP_WAIT, &b);
    ds_buf_free(&b);
}

static int recv_all(int fd, uint8_t *p, size_t n) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    while (n > 0) {
        if (poll(&pf, 1, 5000) != 1) return -1;
        ssize_t r = recv(fd, p, n, 0);
        if (r <= 0) return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads one TAGGED answer: its tag, inner status and body (text, NUL-terminated). */
static void read_tagged(int fd, uint32_t *tag, int *status, char *body, size_t cap) {
    uint8_t hdr[10];
    assert_int_equal(recv_all(fd, hdr, 10), 0);
    assert_int_equal(hdr[4], DS_STORE_TAGGED);
    *tag = ds_load_u32(hdr + 5);
    *status = hdr[9];
    size_t n = ds_load_u32(hdr) - 6;
    assert_true(n < cap);
    assert_int_equal(recv_all(fd, (uint8_t *)body, n), 0);
    body[n] = 0;
}

/* Nothing arrives on fd within ms. */
static int quiet(int fd, int ms) {
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    return poll(&pf, 1, ms) == 0;
}

static void test_tagged_requests_are_independent(void **state) {
    fixture *f = *state;
    int fd = raw_connect(f);
    raw_auth(fd, f->token);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);

    send_get(fd, 1, "k1", -1);           /* waits for k1 */
    send_wait(fd, 2, "k2", "k3", -1);    /* waits for k2 and k3 */
    send_get(fd, 3, "never", 100);       /* times out */
    send_set(fd, 4, "mine", "x");        /* answered at once, behind three waiting requests */
    uint32_t tag;
    int st;
    char body[256];
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 4);
    assert_int_equal(st, DS_STORE_OK);
    assert_true(wait_count(f, ds_store_server_nwaiting, 3));

    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 3);
    assert_int_equal(st, DS_STORE_TIMEOUT);

    /* Another client sets k2: the WAIT moves on to k3, the GET of k1 is untouched. */
    ds_store_client *c = connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set(c, "k2", "2", 1, &err), 0);
    assert_true(quiet(fd, 100));
    assert_int_equal(ds_store_set(c, "k3", "3", 1, &err), 0);
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 2);
    assert_int_equal(st, DS_STORE_OK);
    assert_int_equal(ds_store_set(c, "k1", "one", 3, &err), 0);
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 1);
    assert_int_equal(st, DS_STORE_OK);
    assert_string_equal(body, "one");

    /* CANCEL drops a waiting request without an answer. */
    send_get(fd, 5, "gone", -1);
    assert_true(wait_count(f, ds_store_server_nwaiting, 1));
    send_tagged(fd, 5, DS_STORE_OP_CANCEL, NULL);
    assert_true(wait_count(f, ds_store_server_nwaiting, 0));
    assert_int_equal(ds_store_set(c, "gone", "g", 1, &err), 0);
    assert_true(quiet(fd, 100));

    /* A malformed tagged request is answered ERROR; the connection stays. */
    send_tagged(fd, 6, DS_STORE_OP_GET, NULL);
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 6);
    assert_int_equal(st, DS_STORE_ERROR);
    assert_non_null(strstr(body, "truncated GET"));
    send_set(fd, 7, "still", "here");
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 7);
    assert_int_equal(st, DS_STORE_OK);
    ds_store_close(c);
    close(fd);
}

/* Many waiters on many keys: setting one key answers exactly its waiters. */
static void test_key_index(void **state) {
    fixture *f = *state;
    int fd = raw_connect(f);
    raw_auth(fd, f->token);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);
    enum { KEYS = 50, PER_KEY = 4 };
    for (uint32_t i = 0; i < KEYS * PER_KEY; i++) {
        char key[32];
        snprintf(key, sizeof key, "ix/%u", i % KEYS);
        send_get(fd, i, key, -1);
    }
    assert_true(wait_count(f, ds_store_server_nwaiting, KEYS * PER_KEY));
    ds_store_client *c = connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set(c, "ix/7", "v", 1, &err), 0);
    for (int i = 0; i < PER_KEY; i++) {
        uint32_t tag;
        int st;
        char body[64];
        read_tagged(fd, &tag, &st, body, sizeof body);
        assert_int_equal(tag % KEYS, 7);
        assert_int_equal(st, DS_STORE_OK);
    }
    assert_true(quiet(fd, 50));
    assert_int_equal(ds_store_server_nwaiting(f->srv), (KEYS - 1) * PER_KEY);
    ds_store_close(c);
    close(fd); /* its waiters go with it */
    assert_true(wait_count(f, ds_store_server_nwaiting, 0));
}

static void test_over_the_limit_is_told(void **state) {
    (void)state;
    setenv("DS_STORE_MAX_CLIENTS", "2", 1);
    fixture *f = NULL;
    int up = fixture_up((void **)&f);
    unsetenv("DS_STORE_MAX_CLIENTS");
    assert_int_equal(up, 0);
    ds_store_client *a = connect_ok(f), *b = connect_ok(f);
    ds_err err = {{0}};
    ds_store_client *c = ds_store_connect("127.0.0.1", f->port, f->token, 2000, &err);
    assert_null(c);
    assert_non_null(strstr(err.msg, "refused this client: too many connections: this store serves at most 2"));
    ds_store_event ev;
    assert_true(wait_event(f, DS_STORE_EV_CLIENT_REJECTED, &ev));
    assert_non_null(strstr(ev.reason, "too many connections"));
    /* The ones it serves never noticed; a place that frees up is taken again. */
    assert_int_equal(ds_store_set(a, "k", "v", 1, &err), 0);
    ds_store_close(b);
    assert_true(wait_count(f, ds_store_server_nclients, 1));
    c = connect_ok(f);
    ds_store_close(c);
    ds_store_close(a);
    fixture_down((void **)&f);
}

/* BARRIER with several ranks in one request, as an agent arrives for its node: the
 * store counts each rank, answers every waiter once all arrived, says who is missing
 * meanwhile, refuses a rank that arrives twice or another world, and forgets the
 * barrier once released. */
static void send_barrier(int fd, uint32_t tag, const char *name, uint32_t world, const uint32_t *ranks, uint32_t n,
                         int32_t timeout_ms) {
    ds_buf b = {0};
    ds_buf_put_u32(&b, (uint32_t)timeout_ms);
    ds_buf_put_u32(&b, world);
    ds_buf_put_u32(&b, n);
    for (uint32_t i = 0; i < n; i++) ds_buf_put_u32(&b, ranks[i]);
    ds_buf_put(&b, name, strlen(name));
    send_tagged(fd, tag, DS_STORE_OP_BARRIER, &b);
    ds_buf_free(&b);
}

static void test_barrier_of_several_ranks(void **state) {
    fixture *f = *state;
    int fd = raw_connect(f);
    raw_auth(fd, f->token);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);
    uint32_t tag;
    int st;
    char body[256];

    send_barrier(fd, 1, "b", 5, (uint32_t[]){0, 1}, 2, -1); /* a node of ranks 0, 1 */
    send_barrier(fd, 2, "b", 5, (uint32_t[]){3}, 1, -1);
    send_barrier(fd, 3, "b", 5, (uint32_t[]){1}, 1, -1);    /* rank 1 again */
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 3);
    assert_int_equal(st, DS_STORE_ERROR);
    assert_non_null(strstr(body, "barrier 'b': rank 1 arrived twice"));
    send_barrier(fd, 4, "b", 6, (uint32_t[]){4}, 1, -1);
    read_tagged(fd, &tag, &st, body, sizeof body);
    assert_int_equal(tag, 4);
    assert_int_equal(st, DS_STORE_ERROR);
    assert_non_null(strstr(body, "a world of 6 here, 5 at a rank that arrived before"));
    assert_true(wait_count(f, ds_store_server_nwaiting, 2));

    ds_store_client *c = connect_ok(f);
    ds_err err;
    int arrived, missing, listed[DS_STORE_BARRIER_LISTED], nlisted;
    assert_int_equal(ds_store_barrier_status(c, "b", 5, &arrived, &missing, listed, &nlisted, &err), 0);
    assert_int_equal(arrived, 3);
    assert_int_equal(missing, 2);
    assert_int_equal(nlisted, 2);
    assert_int_equal(listed[0], 2);
    assert_int_equal(listed[1], 4);
    assert_int_equal(ds_store_barrier_arrive(c, "b", 2, 5, 0, &err), 1); /* arrives, gives up */
    assert_true(quiet(fd, 50));
    assert_int_equal(ds_store_barrier_arrive(c, "b", 4, 5, 5000, &err), 0); /* the last one */
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        read_tagged(fd, &tag, &st, body, sizeof body);
        assert_int_equal(st, DS_STORE_OK);
        seen |= 1 << tag;
    }
    assert_int_equal(seen, (1 << 1) | (1 << 2));
    assert_true(wait_count(f, ds_store_server_nwaiting, 0));
    assert_int_equal(ds_store_barrier_status(c, "b", 5, &arrived, &missing, listed, &nlisted, &err), 0);
    assert_int_equal(arrived, 0); /* released and forgotten */
    assert_int_equal(ds_store_server_requests(f->srv, DS_STORE_OP_BARRIER), 8);

    /* A waiting barrier request is cancelled like a GET. */
    send_barrier(fd, 5, "c", 2, (uint32_t[]){0}, 1, -1);
    assert_true(wait_count(f, ds_store_server_nwaiting, 1));
    send_tagged(fd, 5, DS_STORE_OP_CANCEL, NULL);
    assert_true(wait_count(f, ds_store_server_nwaiting, 0));
    ds_store_close(c);
    close(fd);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_tagged_requests_are_independent, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_key_index, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_barrier_of_several_ranks, fixture_up, fixture_down),
        cmocka_unit_test(test_over_the_limit_is_told),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
