/* The rendezvous store: server and client together on loopback. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "store_test_util.h"
#include "ds_clock.h"

static void test_token(void **state) {
    (void)state;
    char a[65], b[65];
    ds_err err;
    assert_int_equal(ds_store_make_token(a, &err), 0);
    assert_int_equal(ds_store_make_token(b, &err), 0);
    assert_int_equal(strlen(a), 64);
    assert_true(ds_store_token_valid(a));
    assert_string_not_equal(a, b);
    assert_false(ds_store_token_valid("abc"));
    b[10] = 'z';
    assert_false(ds_store_token_valid(b));
    assert_true(ds_store_token_equal("same", "same", 4));
    assert_false(ds_store_token_equal("same", "sane", 4));
}

/* DS_RDZV's host:port, IPv6 hosts with or without brackets. */
static void test_split_addr(void **state) {
    (void)state;
    char host[64];
    int port = 0;
    ds_err err = {{0}};
    assert_int_equal(ds_store_split_addr("10.0.0.1:29400", host, sizeof host, &port, &err), 0);
    assert_string_equal(host, "10.0.0.1");
    assert_int_equal(port, 29400);
    assert_int_equal(ds_store_split_addr("[::1]:80", host, sizeof host, &port, &err), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 80);
    assert_int_equal(ds_store_split_addr("fe80::2:81", host, sizeof host, &port, &err), 0);
    assert_string_equal(host, "fe80::2");
    static const char *const bad[] = {"host", ":80", "h:", "h:0", "h:65536", "h:8x", "[]:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ds_store_split_addr(bad[i], host, sizeof host, &port, &err), -1);
        assert_non_null(strstr(err.msg, "is not host:port"));
    }
    assert_int_equal(ds_store_split_addr("a-very-long-host-name-indeed:1", host, 8, &port, &err), -1);
}

static void test_port_zero_and_basic_ops(void **state) {
    fixture *f = *state;
    assert_true(f->port > 0);
    ds_store_client *c = connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set(c, "k", "v1", 2, &err), 0);
    assert_int_equal(ds_store_set(c, "k", "value two", 9, &err), 0); /* overwrite */
    void *v;
    size_t len;
    assert_int_equal(ds_store_get(c, "k", &v, &len, 1000, &err), 0);
    assert_int_equal(len, 9);
    assert_string_equal(v, "value two"); /* NUL past the end */
    free(v);
    /* Binary and empty values survive. */
    const uint8_t bin[5] = {0, 255, 0, 10, 13};
    assert_int_equal(ds_store_set(c, "bin", bin, 5, &err), 0);
    assert_int_equal(ds_store_get(c, "bin", &v, &len, 1000, &err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(v, bin, 5);
    free(v);
    assert_int_equal(ds_store_set(c, "empty", "", 0, &err), 0);
    assert_int_equal(ds_store_get(c, "empty", &v, &len, 1000, &err), 0);
    assert_int_equal(len, 0);
    free(v);

    int64_t n;
    assert_int_equal(ds_store_add(c, "ctr", 5, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_int_equal(ds_store_add(c, "ctr", -7, &n, &err), 0);
    assert_int_equal(n, -2);
    assert_int_equal(ds_store_get(c, "ctr", &v, &len, 1000, &err), 0);
    assert_string_equal(v, "-2");
    free(v);
    /* ADD on a non-integer is an error answer, not a dropped connection. */
    assert_int_equal(ds_store_add(c, "k", 1, &n, &err), -1);
    assert_non_null(strstr(err.msg, "not an integer"));

    int exists;
    const char *both[2] = {"k", "ctr"}, *some[2] = {"k", "nope"};
    assert_int_equal(ds_store_check(c, both, 2, &exists, &err), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(ds_store_check(c, some, 2, &exists, &err), 0);
    assert_int_equal(exists, 0);

    int deleted;
    assert_int_equal(ds_store_delete(c, "k", &deleted, &err), 0);
    assert_int_equal(deleted, 1);
    assert_int_equal(ds_store_delete(c, "k", &deleted, &err), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(ds_store_check(c, both, 2, &exists, &err), 0);
    assert_int_equal(exists, 0);
    assert_int_equal(ds_store_server_nclients(f->srv), 1);
    ds_store_close(c);
}

static void test_prefix(void **state) {
    fixture *f = *state;
    ds_store_client *a = connect_ok(f), *b = connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set_prefix(a, "a1/", &err), 0);
    assert_int_equal(ds_store_set(a, "x", "1", 1, &err), 0);
    void *v;
    size_t len;
    assert_int_equal(ds_store_get(b, "a1/x", &v, &len, 0, &err), 0);
    free(v);
    assert_int_equal(ds_store_get(b, "x", &v, &len, 0, &err), -1);
    /* Errors name the key as the server sees it, the store, and the timeout. */
    char want[128];
    snprintf(want, sizeof want, "get 'x' from 127.0.0.1:%d: timed out after 0 s", f->port);
    assert_string_equal(err.msg, want);
    ds_store_close(a);
    ds_store_close(b);
}

typedef struct getter {
    fixture *f;
    const char *key;
    int timeout_ms, rc;
    char val[64];
    ds_err err;
} getter;

static void *get_thread(void *arg) {
    getter *g = arg;
    ds_store_client *c = ds_store_connect("127.0.0.1", g->f->port, g->f->token, 5000, &g->err);
    if (!c) return NULL;
    void *v;
    size_t len;
    g->rc = ds_store_get(c, g->key, &v, &len, g->timeout_ms, &g->err);
    if (g->rc == 0) {
        snprintf(g->val, sizeof g->val, "%s", (char *)v);
        free(v);
    }
    ds_store_close(c);
    return NULL;
}

/* A get blocks until another client sets the key, and blocks nobody else meanwhile. */
static void test_blocking_get(void **state) {
    fixture *f = *state;
    getter g = {.f = f, .key = "later", .timeout_ms = 10000, .rc = -5};
    pthread_t t;
    pthread_create(&t, NULL, get_thread, &g);
    assert_true(wait_count(f, ds_store_server_nwaiting, 1));
    ds_store_client *c = connect_ok(f);
    ds_err err;
    int64_t n;
    assert_int_equal(ds_store_add(c, "other", 1, &n, &err), 0); /* not blocked by the waiter */
    assert_int_equal(ds_store_set(c, "later", "hello", 5, &err), 0);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, 0);
    assert_string_equal(g.val, "hello");
    assert_int_equal(ds_store_server_nwaiting(f->srv), 0);
    ds_store_close(c);
}

/* The controller's own set wakes waiters too. */
static void test_server_set_wakes(void **state) {
    fixture *f = *state;
    getter g = {.f = f, .key = "abort", .timeout_ms = 10000, .rc = -5};
    pthread_t t;
    pthread_create(&t, NULL, get_thread, &g);
    assert_true(wait_count(f, ds_store_server_nwaiting, 1));
    ds_err err;
    assert_int_equal(ds_store_server_set(f->srv, "abort", "yes", 3, &err), 0);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, 0);
    assert_string_equal(g.val, "yes");
}

static void test_timeouts(void **state) {
    fixture *f = *state;
    ds_store_client *c = connect_ok(f);
    ds_err err;
    void *v;
    size_t len;
    int64_t t0 = ds_now_ms();
    assert_int_equal(ds_store_get(c, "nccl/uid", &v, &len, 200, &err), -1);
    int64_t took = ds_now_ms() - t0;
    assert_true(took >= 200 && took < 3000);
    char want[128];
    snprintf(want, sizeof want, "get 'nccl/uid' from 127.0.0.1:%d: timed out after 0.2 s", f->port);
    assert_string_equal(err.msg, want);
    const char *keys[2] = {"w1", "w2"};
    assert_int_equal(ds_store_wait(c, keys, 2, 100, &err), -1);
    assert_non_null(strstr(err.msg, "wait for 'w1', 'w2'"));
    assert_non_null(strstr(err.msg, "timed out after 0.1 s"));
    /* The connection is still in step after server-side timeouts. */
    assert_int_equal(ds_store_set(c, "w1", "", 0, &err), 0);
    assert_int_equal(ds_store_set(c, "w2", "", 0, &err), 0);
    assert_int_equal(ds_store_wait(c, keys, 2, 100, &err), 0);
    ds_store_close(c);
}

typedef struct adder {
    fixture *f;
    int n;
    int64_t *seen; /* values returned, one slot each */
} adder;

static void *add_thread(void *arg) {
    adder *a = arg;
    ds_err err;
    ds_store_client *c = ds_store_connect("127.0.0.1", a->f->port, a->f->token, 5000, &err);
    for (int i = 0; c && i < a->n; i++)
        if (ds_store_add(c, "atomic", 1, &a->seen[i], &err) != 0) a->seen[i] = -1;
    ds_store_close(c);
    return NULL;
}

/* Concurrent adds from several clients: every returned value is distinct, none lost. */
static void test_add_atomic(void **state) {
    fixture *f = *state;
    enum { T = 4, N = 300 };
    static int64_t seen[T][N];
    adder a[T];
    pthread_t t[T];
    for (int i = 0; i < T; i++) {
        a[i] = (adder){f, N, seen[i]};
        pthread_create(&t[i], NULL, add_thread, &a[i]);
    }
    for (int i = 0; i < T; i++) pthread_join(t[i], NULL);
    static uint8_t hit[T * N + 1];
    memset(hit, 0, sizeof hit);
    for (int i = 0; i < T; i++) {
        for (int j = 0; j < N; j++) {
            assert_true(seen[i][j] >= 1 && seen[i][j] <= T * N);
            assert_false(hit[seen[i][j]]);
            hit[seen[i][j]] = 1;
        }
    }
    ds_store_client *c = connect_ok(f);
    int64_t total;
    ds_err err;
    assert_int_equal(ds_store_add(c, "atomic", 0, &total, &err), 0);
    assert_int_equal(total, T * N);
    ds_store_close(c);
}

/* Each child: count itself in, pass the barrier, and check that everyone counted
 * themselves in before anyone got out. Exit 0, or non-zero saying what failed. */
static void barrier_child(fixture *f, int rank, int world, const char *name) {
    ds_err err;
    ds_store_client *c = ds_store_connect("127.0.0.1", f->port, f->token, 5000, &err);
    if (!c) _exit(10);
    char before[64];
    snprintf(before, sizeof before, "test/%s/before", name);
    int64_t n = 0;
    int rc = ds_store_add(c, before, 1, &n, &err);
    if (rc == 0) rc = ds_store_barrier(c, name, rank, world, 10000, &err);
    if (rc == 0) rc = ds_store_add(c, before, 0, &n, &err);
    if (rc != 0) fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    ds_store_close(c);
    _exit(rc != 0 ? 11 : n != world ? 12 : 0);
}

static void test_barrier_processes(void **state) {
    fixture *f = *state;
    enum { W = 6 };
    pid_t pid[W];
    for (int round = 0; round < 2; round++) {
        const char *name = round ? "second" : "first";
        for (int r = 0; r < W; r++) {
            pid[r] = fork();
            assert_true(pid[r] >= 0);
            if (pid[r] == 0) barrier_child(f, r, W, name);
        }
        for (int r = 0; r < W; r++) {
            int st;
            assert_int_equal(waitpid(pid[r], &st, 0), pid[r]);
            assert_true(WIFEXITED(st));
            assert_int_equal(WEXITSTATUS(st), 0);
        }
        /* The barrier left nothing behind: no keys, and its record at the store is gone
         * (one kept after its release would answer that all W arrived). */
        ds_store_client *c = connect_ok(f);
        char key[64];
        snprintf(key, sizeof key, "barrier/%s", name);
        const char *keys[1] = {key};
        int exists = 1, arrived = -1, missing = 0, listed[DS_STORE_BARRIER_LISTED], nlisted = 0;
        ds_err err;
        assert_int_equal(ds_store_check(c, keys, 1, &exists, &err), 0);
        assert_int_equal(exists, 0);
        assert_int_equal(ds_store_barrier_status(c, key, W, &arrived, &missing, listed, &nlisted, &err), 0);
        assert_int_equal(arrived, 0);
        ds_store_close(c);
    }
}

/* More keys than one WAIT or CHECK carries (DS_STORE_MAX_KEYS): the client asks in
 * turns, so a rendezvous of thousands of ranks' keys works; one missing key past the
 * first turn is still waited for and still makes the check false. */
static void test_wait_many_keys(void **state) {
    fixture *f = *state;
    ds_store_client *c = connect_ok(f);
    enum { N = DS_STORE_MAX_KEYS * 2 + 17 };
    static char names[N][24];
    static const char *keys[N];
    ds_err err;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "many/%d", i);
        keys[i] = names[i];
        if (i != N - 5) assert_int_equal(ds_store_set(c, keys[i], "x", 1, &err), 0);
    }
    int exists = 1;
    assert_int_equal(ds_store_check(c, keys, N, &exists, &err), 0);
    assert_int_equal(exists, 0);
    assert_int_equal(ds_store_wait(c, keys, N, 100, &err), -1);
    assert_non_null(strstr(err.msg, "timed out"));
    assert_int_equal(ds_store_set(c, keys[N - 5], "x", 1, &err), 0);
    assert_int_equal(ds_store_check(c, keys, N, &exists, &err), 0);
    assert_int_equal(exists, 1);
    assert_int_equal(ds_store_wait(c, keys, N, 2000, &err), 0);
    ds_store_close(c);
}

/* Ranks 0 and 1 of 3 come; the error says 2 of 3 arrived and rank 2 is missing. */
static void test_barrier_timeout(void **state) {
    fixture *f = *state;
    ds_store_client *c0 = connect_ok(f), *c1 = connect_ok(f);
    ds_err err;
    /* Rank 1 arrives and gives up at once (its arrival stays), so this test needs no
     * second thread. */
    assert_int_equal(ds_store_barrier_arrive(c1, "barrier/late", 1, 3, 0, &err), 1);
    assert_int_equal(ds_store_barrier(c0, "late", 0, 3, 200, &err), -1);
    assert_non_null(strstr(err.msg, "barrier 'late'"));
    assert_non_null(strstr(err.msg, "timed out after 0.2 s"));
    assert_non_null(strstr(err.msg, "2 of 3 ranks arrived; missing rank 2"));
    assert_int_equal(ds_store_barrier(c0, "bad", 3, 3, 200, &err), -1);
    ds_store_close(c0);
    ds_store_close(c1);
}

static void test_wrong_token_dropped(void **state) {
    fixture *f = *state;
    ds_store_client *good = connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set(good, "before", "1", 1, &err), 0);

    char bad[65];
    memcpy(bad, f->token, 65);
    bad[0] = bad[0] == 'a' ? 'b' : 'a';
    ds_store_client *c = ds_store_connect("127.0.0.1", f->port, bad, 2000, &err);
    assert_null(c);
    assert_non_null(strstr(err.msg, "refused this client"));
    ds_store_event ev;
    assert_true(wait_event(f, DS_STORE_EV_CLIENT_REJECTED, &ev));
    assert_string_equal(ev.reason, "wrong token");
    assert_non_null(strstr(ev.peer, "127.0.0.1:"));

    /* A client that says nothing valid at all. */
    int fd = raw_connect(f);
    assert_int_equal(send(fd, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL), 18);
    assert_true(raw_closed(fd));
    close(fd);
    assert_true(wait_event(f, DS_STORE_EV_CLIENT_REJECTED, &ev));
    assert_non_null(strstr(ev.reason, "not AUTH"));

    /* The good client never noticed. */
    void *v;
    size_t len;
    assert_int_equal(ds_store_get(good, "before", &v, &len, 1000, &err), 0);
    free(v);
    assert_int_equal(ds_store_server_nclients(f->srv), 1);
    ds_store_close(good);
}

/* Sends one authenticated frame and expects to be dropped with `reason` in the event. */
static void expect_dropped(fixture *f, const ds_buf *frame, const char *reason) {
    int fd = raw_connect(f);
    raw_auth(fd, f->token);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);
    raw_send(fd, frame);
    assert_true(raw_closed(fd));
    close(fd);
    ds_store_event ev;
    assert_true(wait_event(f, DS_STORE_EV_CLIENT_REJECTED, &ev));
    if (!strstr(ev.reason, reason)) fail_msg("reason '%s', expected '%s'", ev.reason, reason);
}

static void test_malformed_and_oversized(void **state) {
    fixture *f = *state;
    ds_store_client *good = connect_ok(f);
    ds_err err;
    void *v;
    size_t len;

    ds_buf b = {0};
    /* Unknown op. */
    ds_frame_begin(&b, 99);
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "unknown op 99");
    /* Zero-length frame. */
    b.len = 0;
    ds_buf_put_u32(&b, 0);
    expect_dropped(f, &b, "frame of 0 bytes");
    /* Key length pointing past the frame. */
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_SET);
    ds_buf_put_u32(&b, 100);
    ds_buf_put(&b, "short", 5);
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "truncated key");
    /* Key over 4 KiB. */
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_SET);
    ds_buf_put_u32(&b, 5000);
    static char big_key[5000];
    memset(big_key, 'k', sizeof big_key);
    ds_buf_put(&b, big_key, sizeof big_key);
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "key of 5000 bytes over the 4096-byte limit");
    /* A frame announced over the limit is dropped on its header, before any body. */
    b.len = 0;
    ds_buf_put_u32(&b, DS_STORE_MAX_FRAME + 1);
    ds_buf_put_u8(&b, DS_STORE_OP_SET);
    expect_dropped(f, &b, "limit");
    /* A value one byte over 64 MiB in a frame under the frame limit. */
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_SET);
    ds_buf_put_u32(&b, 1);
    ds_buf_put_u8(&b, 'v');
    ds_buf_reserve(&b, DS_STORE_MAX_VALUE + 1);
    memset(b.data + b.len, 'x', DS_STORE_MAX_VALUE + 1);
    b.len += DS_STORE_MAX_VALUE + 1;
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "value of 67108865 bytes over the 67108864-byte limit");
    /* NUL inside a key. */
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_DELETE);
    ds_buf_put(&b, "a\0b", 3);
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "NUL");
    /* Heartbeat with trailing junk. */
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_HEARTBEAT);
    ds_buf_put_u32(&b, 1);
    ds_buf_put_u8(&b, 1);
    ds_frame_end(&b, 0);
    expect_dropped(f, &b, "malformed HEARTBEAT");
    ds_buf_free(&b);

    /* The client library refuses oversized input itself, without being dropped. */
    static char key4097[4098];
    memset(key4097, 'k', 4097);
    assert_int_equal(ds_store_set(good, key4097, "", 0, &err), -1);
    assert_non_null(strstr(err.msg, "key of 4097 bytes over the 4096-byte limit"));
    assert_int_equal(ds_store_set(good, "fine", "", DS_STORE_MAX_VALUE + 1ul, &err), -1);
    assert_non_null(strstr(err.msg, "over the 67108864-byte limit"));
    /* And a value of exactly 64 MiB goes through. */
    char *max = malloc(DS_STORE_MAX_VALUE);
    memset(max, 'm', DS_STORE_MAX_VALUE);
    assert_int_equal(ds_store_set(good, "max", max, DS_STORE_MAX_VALUE, &err), 0);
    assert_int_equal(ds_store_get(good, "max", &v, &len, 1000, &err), 0);
    assert_int_equal(len, DS_STORE_MAX_VALUE);
    assert_memory_equal(v, max, DS_STORE_MAX_VALUE);
    free(v);
    free(max);
    int deleted;
    assert_int_equal(ds_store_delete(good, "max", &deleted, &err), 0);
    assert_int_equal(ds_store_server_nclients(f->srv), 1);
    ds_store_close(good);
}

static void test_heartbeat_and_node_lost(void **state) {
    fixture *f = *state;
    ds_err err;
    assert_int_equal(ds_store_server_last_heartbeat_ms(f->srv, 3), -1);
    ds_store_client *agent = connect_ok(f);
    int64_t t0 = ds_now_ms();
    assert_int_equal(ds_store_heartbeat(agent, 3, &err), 0);
    ds_store_event ev;
    assert_true(wait_event(f, DS_STORE_EV_NODE_CONNECTED, &ev));
    assert_int_equal(ev.node_rank, 3);
    int64_t hb = ds_store_server_last_heartbeat_ms(f->srv, 3);
    assert_true(hb >= t0 && hb <= ds_now_ms());
    assert_int_equal(ds_store_heartbeat(agent, 3, &err), 0);
    assert_true(ds_store_server_last_heartbeat_ms(f->srv, 3) >= hb);
    /* Another node's heartbeat on the same connection is a protocol error. */
    assert_int_equal(ds_store_server_last_heartbeat_ms(f->srv, 0), -1);
    ds_store_close(agent);
    assert_true(wait_event(f, DS_STORE_EV_NODE_LOST, &ev));
    assert_int_equal(ev.node_rank, 3);
    assert_string_equal(ev.reason, "connection closed");
    /* Plain clients that never heartbeat leave no node event behind. */
    ds_store_client *plain = connect_ok(f);
    ds_store_close(plain);
    assert_true(wait_count(f, ds_store_server_nclients, 0));
    assert_false(ds_store_server_next_event(f->srv, &ev));
    ds_store_client *probe = connect_ok(f);
    assert_int_equal(ds_store_heartbeat(probe, 4, &err), 0);
    assert_true(wait_event(f, DS_STORE_EV_NODE_CONNECTED, &ev));
    assert_int_equal(ev.node_rank, 4);
    assert_false(ds_store_server_next_event(f->srv, &ev));
    assert_int_equal(ds_store_heartbeat(probe, 5, &err), -1); /* dropped: node 4's connection */
    assert_true(wait_event(f, DS_STORE_EV_NODE_LOST, &ev));
    assert_int_equal(ev.node_rank, 4);
    assert_non_null(strstr(ev.reason, "heartbeat for node 5 on the connection of node 4"));
    /* The client is now unusable and says why. */
    assert_int_equal(ds_store_heartbeat(probe, 4, &err), -1);
    assert_non_null(strstr(err.msg, "unusable"));
    ds_store_close(probe);
}

static void test_connect_errors(void **state) {
    fixture *f = *state;
    ds_err err;
    assert_null(ds_store_connect("127.0.0.1", f->port, "short", 1000, &err));
    assert_non_null(strstr(err.msg, "64 hex"));
    /* A port nobody listens on: refused until the timeout, then a clear error. */
    ds_store_server *tmp;
    assert_int_equal(ds_store_server_start("127.0.0.1", 0, f->token, &tmp, &err), 0);
    int dead_port = ds_store_server_port(tmp);
    ds_store_server_stop(tmp);
    assert_null(ds_store_connect("127.0.0.1", dead_port, f->token, 200, &err));
    assert_non_null(strstr(err.msg, "cannot connect"));
    assert_int_equal(ds_store_server_start("127.0.0.1", 70000, f->token, &tmp, &err), -1);
    assert_int_equal(ds_store_server_start("no.such.host.invalid", 0, f->token, &tmp, &err), -1);
    assert_non_null(strstr(err.msg, "cannot resolve"));
}

/* The server going away mid-wait: the client gets an error naming the store, not a hang. */
static void test_server_gone(void **state) {
    (void)state;
    fixture *f = NULL;
    assert_int_equal(fixture_up((void **)&f), 0);
    getter g = {.f = f, .key = "never", .timeout_ms = 20000, .rc = -5};
    pthread_t t;
    pthread_create(&t, NULL, get_thread, &g);
    assert_true(wait_count(f, ds_store_server_nwaiting, 1));
    ds_store_server_stop(f->srv);
    pthread_join(t, NULL);
    assert_int_equal(g.rc, -1);
    assert_non_null(strstr(g.err.msg, "closed the connection"));
    free(f);
}

/* ~100 connections as a 16-node job has, all blocked in GET at once: a waiter that hangs
 * up is forgotten, the others all get the value from one set, and meanwhile a plain
 * client is served as if nobody waited. */
static void test_many_blocked_clients(void **state) {
    fixture *f = *state;
    enum { N = 100 };
    int fd[N];
    ds_buf get = {0};
    ds_frame_begin(&get, DS_STORE_OP_GET);
    ds_buf_put_u32(&get, 10000);
    ds_buf_put(&get, "many", 4);
    ds_frame_end(&get, 0);
    for (int i = 0; i < N; i++) {
        fd[i] = raw_connect(f);
        raw_auth(fd[i], f->token);
        assert_int_equal(raw_reply(fd[i]), DS_STORE_OK);
        raw_send(fd[i], &get);
    }
    ds_buf_free(&get);
    assert_true(wait_count(f, ds_store_server_nwaiting, N));
    for (int i = 0; i < N / 2; i++) close(fd[i]);
    assert_true(wait_count(f, ds_store_server_nwaiting, N / 2));
    assert_true(wait_count(f, ds_store_server_nclients, N / 2));

    ds_store_client *c = connect_ok(f);
    ds_err err;
    int64_t n;
    for (int i = 0; i < 100; i++) assert_int_equal(ds_store_add(c, "busy", 1, &n, &err), 0);
    assert_int_equal(ds_store_set(c, "many", "v", 1, &err), 0);
    for (int i = N / 2; i < N; i++) {
        assert_int_equal(raw_reply(fd[i]), DS_STORE_OK);
        close(fd[i]);
    }
    assert_int_equal(ds_store_server_nwaiting(f->srv), 0);
    ds_store_close(c);
}

/* Frames split into single bytes, several frames in one write, and a client that sends
 * many requests before reading any answer (its answers pile up past the server's
 * high-water mark): all are served, in order. */
static void test_framing(void **state) {
    fixture *f = *state;
    int fd = raw_connect(f);
    ds_buf b = {0};
    ds_frame_begin(&b, DS_STORE_OP_AUTH);
    ds_buf_put_u32(&b, DS_STORE_VERSION);
    ds_buf_put(&b, f->token, DS_STORE_TOKEN_LEN);
    ds_frame_end(&b, 0);
    size_t start = b.len;
    ds_frame_begin(&b, DS_STORE_OP_SET);
    ds_buf_put_u32(&b, 3);
    ds_buf_put(&b, "k/1", 3);
    ds_buf_put(&b, "value", 5);
    ds_frame_end(&b, start);
    for (size_t i = 0; i < b.len; i++) assert_int_equal(send(fd, b.data + i, 1, MSG_NOSIGNAL), 1);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);

    /* A 512 KiB value, then 8 GETs of it in one write before reading: 4 MiB of answers. */
    enum { BIG = 512 << 10, NGET = 8 };
    b.len = 0;
    ds_frame_begin(&b, DS_STORE_OP_SET);
    ds_buf_put_u32(&b, 3);
    ds_buf_put(&b, "big", 3);
    ds_buf_reserve(&b, BIG);
    memset(b.data + b.len, 'b', BIG);
    b.len += BIG;
    ds_frame_end(&b, 0);
    for (int i = 0; i < NGET; i++) {
        start = b.len;
        ds_frame_begin(&b, DS_STORE_OP_GET);
        ds_buf_put_u32(&b, 1000);
        ds_buf_put(&b, "big", 3);
        ds_frame_end(&b, start);
    }
    raw_send(fd, &b);
    assert_int_equal(raw_reply(fd), DS_STORE_OK);
    for (int i = 0; i < NGET; i++) assert_int_equal(raw_reply(fd), DS_STORE_OK);
    ds_buf_free(&b);
    close(fd);
}

/* Random frames (fixed seed) from authenticated clients: whatever they mean, the server
 * survives them and a well-behaved client is served throughout. */
static void test_random_frames(void **state) {
    fixture *f = *state;
    ds_store_client *good = connect_ok(f);
    ds_err err;
    uint32_t seed = 12345;
    for (int i = 0; i < 300; i++) {
        uint8_t frame[96];
        for (size_t k = 0; k < sizeof frame; k++) frame[k] = (uint8_t)((seed = seed * 1103515245u + 12345u) >> 16);
        size_t n = 5 + frame[5] % 80;
        frame[4] = frame[4] % 10;                                 /* mostly real ops */
        if (frame[6] & 1) ds_store_u32(frame, (uint32_t)(n - 4)); /* mostly honest lengths */
        int fd = raw_connect(f);
        raw_auth(fd, f->token);
        ds_buf b = {.data = frame, .len = n, .cap = n};
        raw_send(fd, &b);
        close(fd);
        if (i % 50 == 0) {
            int64_t v;
            assert_int_equal(ds_store_add(good, "alive", 1, &v, &err), 0);
        }
    }
    assert_true(wait_count(f, ds_store_server_nclients, 1));
    assert_true(wait_count(f, ds_store_server_nwaiting, 0));
    int64_t v;
    assert_int_equal(ds_store_add(good, "alive", 1, &v, &err), 0);
    assert_int_equal(v, 7);
    ds_store_close(good);
}

/* A connection that never authenticates is dropped after DS_STORE_AUTH_TIMEOUT_MS. */
static void test_auth_timeout(void **state) {
    (void)state;
    setenv("DS_STORE_AUTH_TIMEOUT_MS", "150", 1);
    fixture *f = NULL;
    int up = fixture_up((void **)&f);
    unsetenv("DS_STORE_AUTH_TIMEOUT_MS");
    assert_int_equal(up, 0);
    int fd = raw_connect(f);
    assert_int_equal(send(fd, "\0\0", 2, MSG_NOSIGNAL), 2); /* half a header, then silence */
    assert_true(raw_closed(fd));
    close(fd);
    ds_store_event ev;
    assert_true(wait_event(f, DS_STORE_EV_CLIENT_REJECTED, &ev));
    assert_string_equal(ev.reason, "no AUTH within 0.15 s");
    fixture_down((void **)&f);

    ds_store_server *srv;
    ds_err err;
    setenv("DS_STORE_AUTH_TIMEOUT_MS", "soon", 1);
    assert_int_equal(ds_store_server_start("127.0.0.1", 0, "00", &srv, &err), -1);
    char token[65];
    assert_int_equal(ds_store_make_token(token, &err), 0);
    assert_int_equal(ds_store_server_start("127.0.0.1", 0, token, &srv, &err), -1);
    assert_non_null(strstr(err.msg, "DS_STORE_AUTH_TIMEOUT_MS=soon"));
    unsetenv("DS_STORE_AUTH_TIMEOUT_MS");
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token),
        cmocka_unit_test(test_split_addr),
        cmocka_unit_test_setup_teardown(test_port_zero_and_basic_ops, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_prefix, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_blocking_get, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_server_set_wakes, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_timeouts, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_add_atomic, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_many_blocked_clients, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_framing, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_random_frames, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_barrier_processes, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_barrier_timeout, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_wait_many_keys, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_wrong_token_dropped, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_malformed_and_oversized, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_heartbeat_and_node_lost, fixture_up, fixture_down),
        cmocka_unit_test_setup_teardown(test_connect_errors, fixture_up, fixture_down),
        cmocka_unit_test(test_server_gone),
        cmocka_unit_test(test_auth_timeout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
