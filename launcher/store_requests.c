/* What each request of the store's protocol does (store_proto.h), plain or TAGGED. A
 * request reads its body, answers into its client's output buffer, or becomes a waiter
 * (store_waiters.c) when the keys it needs are missing. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_clock.h"
#include "store_server_impl.h"

#define MAX_NODE_RANK 65535

int ds_store_reply(request *q, uint8_t status, const void *a, size_t alen, const void *b, size_t blen) {
    ds_buf *o = &q->c->out;
    size_t start = ds_buf_unread(o);
    int bad = ds_frame_begin(o, q->tagged ? DS_STORE_TAGGED : status);
    if (q->tagged) bad |= ds_buf_put_u32(o, q->tag) | ds_buf_put_u8(o, status);
    if (bad || ds_buf_put(o, a, alen) != 0 || ds_buf_put(o, b, blen) != 0) {
        snprintf(q->why, sizeof q->why, "out of memory replying");
        return REJECT;
    }
    ds_frame_end(o, start);
    return DONE;
}

static int reply_u8(request *q, uint8_t v) { return ds_store_reply(q, DS_STORE_OK, &v, 1, NULL, 0); }

static int reject(request *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int reject(request *q, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->why, sizeof q->why, fmt, ap);
    va_end(ap);
    return REJECT;
}

/* Reads a u32-length-prefixed key (klen_prefixed) or the rest of the body as the key. */
static int read_key(request *q, int prefixed, const uint8_t **key, size_t *klen) {
    size_t n = q->body.n;
    if (prefixed) {
        uint32_t k;
        if (ds_rd_u32(&q->body, &k) != 0) return reject(q, "truncated key length");
        if (k > DS_STORE_MAX_KEY) return reject(q, "key of %u bytes over the %d-byte limit", k, DS_STORE_MAX_KEY);
        n = k;
    } else if (n > DS_STORE_MAX_KEY) {
        return reject(q, "key of %zu bytes over the %d-byte limit", n, DS_STORE_MAX_KEY);
    }
    if (ds_rd_bytes(&q->body, n, key) != 0) return reject(q, "truncated key");
    const char *bad = ds_store_key_problem(*key, n);
    if (bad) return reject(q, "%s", bad);
    *klen = n;
    return DONE;
}

static int do_auth(request *q) {
    uint32_t version;
    const uint8_t *tok;
    if (q->c->authed) return reject(q, "second AUTH frame");
    if (q->tagged) return reject(q, "AUTH inside TAGGED");
    if (q->body.n != 4 + DS_STORE_TOKEN_LEN) return reject(q, "malformed AUTH frame");
    ds_rd_u32(&q->body, &version);
    ds_rd_bytes(&q->body, DS_STORE_TOKEN_LEN, &tok);
    if (version != DS_STORE_VERSION)
        return reject(q, "protocol version %u, this server speaks %d", version, DS_STORE_VERSION);
    if (!ds_store_token_equal(tok, q->s->token, DS_STORE_TOKEN_LEN)) return reject(q, "wrong token");
    q->c->authed = 1;
    pthread_mutex_lock(&q->s->lock);
    q->s->nauthed++;
    pthread_mutex_unlock(&q->s->lock);
    return ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
}

static int do_set(request *q) {
    const uint8_t *key = NULL;
    size_t klen = 0;
    if (read_key(q, 1, &key, &klen) != DONE) return REJECT;
    size_t vlen = q->body.n;
    if (vlen > DS_STORE_MAX_VALUE)
        return reject(q, "value of %zu bytes over the %u-byte limit", vlen, DS_STORE_MAX_VALUE);
    uint8_t *val = malloc(vlen ? vlen : 1);
    if (!val) return reject(q, "out of memory for a value of %zu bytes", vlen);
    memcpy(val, q->body.p, vlen);
    pthread_mutex_lock(&q->s->lock);
    int rc = ds_store_map_put(&q->s->map, key, klen, val, vlen);
    pthread_mutex_unlock(&q->s->lock);
    if (rc != 0) {
        free(val);
        return reject(q, "out of memory for a key");
    }
    ds_store_key_set(q->s, key, klen);
    return ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
}

static int do_get(request *q) {
    uint32_t t;
    const uint8_t *key = NULL;
    size_t klen = 0;
    if (ds_rd_u32(&q->body, &t) != 0) return reject(q, "truncated GET");
    if (read_key(q, 0, &key, &klen) != DONE) return REJECT;
    pthread_mutex_lock(&q->s->lock);
    ds_store_entry *e = ds_store_map_get(&q->s->map, key, klen);
    int rc = e ? ds_store_reply(q, DS_STORE_OK, e->val, e->vlen, NULL, 0) : -1;
    pthread_mutex_unlock(&q->s->lock);
    return rc >= 0 ? rc : ds_store_wait_on(q, (int32_t)t, key, klen);
}

/* Strict decimal int64: what ADD keeps and accepts. */
static int parse_i64(const uint8_t *p, size_t n, int64_t *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end || end == buf || buf[0] == ' ' || buf[0] == '+') return -1;
    *out = v;
    return 0;
}

static int do_add(request *q) {
    uint64_t d;
    const uint8_t *key = NULL;
    size_t klen = 0;
    if (ds_rd_u64(&q->body, &d) != 0) return reject(q, "truncated ADD");
    if (read_key(q, 0, &key, &klen) != DONE) return REJECT;
    int64_t delta = (int64_t)d, cur = 0;
    char msg[160] = "";
    pthread_mutex_lock(&q->s->lock);
    ds_store_entry *e = ds_store_map_get(&q->s->map, key, klen);
    if (e && parse_i64(e->val, e->vlen, &cur) != 0)
        snprintf(msg, sizeof msg, "value of '%.80s' is not an integer", e->key);
    else if (__builtin_add_overflow(cur, delta, &cur))
        snprintf(msg, sizeof msg, "add to '%.*s' overflows int64", (int)(klen < 80 ? klen : 80),
                 (const char *)key);
    int rc = DONE;
    if (!msg[0]) {
        char text[32];
        int n = snprintf(text, sizeof text, "%" PRId64, cur);
        uint8_t *val = malloc((size_t)n);
        if (val) memcpy(val, text, (size_t)n);
        if (!val || ds_store_map_put(&q->s->map, key, klen, val, (size_t)n) != 0) {
            free(val);
            rc = reject(q, "out of memory for a counter");
        }
    }
    pthread_mutex_unlock(&q->s->lock);
    if (rc != DONE) return rc;
    if (msg[0]) return ds_store_reply(q, DS_STORE_ERROR, msg, strlen(msg), NULL, 0);
    ds_store_key_set(q->s, key, klen);
    uint8_t be[8];
    ds_store_u32(be, (uint32_t)((uint64_t)cur >> 32));
    ds_store_u32(be + 4, (uint32_t)cur);
    return ds_store_reply(q, DS_STORE_OK, be, 8, NULL, 0);
}

/* WAIT and CHECK: validates the whole list; *missing gets the first key that does not
 * exist (NULL when all do). */
static int keys_exist(request *q, const uint8_t **missing, size_t *mlen) {
    uint32_t n;
    if (ds_rd_u32(&q->body, &n) != 0) return reject(q, "truncated key count");
    if (n == 0 || n > DS_STORE_MAX_KEYS) return reject(q, "%u keys (1..%d allowed)", n, DS_STORE_MAX_KEYS);
    *missing = NULL;
    pthread_mutex_lock(&q->s->lock);
    int rc = DONE;
    for (uint32_t i = 0; i < n && rc == DONE; i++) {
        const uint8_t *key = NULL;
        size_t klen = 0;
        rc = read_key(q, 1, &key, &klen);
        if (rc == DONE && !*missing && !ds_store_map_get(&q->s->map, key, klen)) *missing = key, *mlen = klen;
    }
    pthread_mutex_unlock(&q->s->lock);
    if (rc == DONE && q->body.n != 0) rc = reject(q, "trailing bytes after the key list");
    return rc;
}

static int do_wait(request *q) {
    uint32_t t;
    const uint8_t *missing;
    size_t mlen = 0;
    if (ds_rd_u32(&q->body, &t) != 0) return reject(q, "truncated WAIT");
    if (keys_exist(q, &missing, &mlen) != DONE) return REJECT;
    return !missing ? ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0) : ds_store_wait_on(q, (int32_t)t, missing, mlen);
}

static int do_check(request *q) {
    const uint8_t *missing;
    size_t mlen = 0;
    if (keys_exist(q, &missing, &mlen) != DONE) return REJECT;
    return reply_u8(q, (uint8_t)(missing == NULL));
}

static int do_delete(request *q) {
    const uint8_t *key = NULL;
    size_t klen = 0;
    if (read_key(q, 0, &key, &klen) != DONE) return REJECT;
    pthread_mutex_lock(&q->s->lock);
    int deleted = ds_store_map_delete(&q->s->map, key, klen);
    pthread_mutex_unlock(&q->s->lock);
    return reply_u8(q, (uint8_t)deleted);
}

static int do_heartbeat(request *q) {
    uint32_t node;
    client *c = q->c;
    if (ds_rd_u32(&q->body, &node) != 0 || q->body.n != 0) return reject(q, "malformed HEARTBEAT");
    if (node > MAX_NODE_RANK) return reject(q, "heartbeat for node %u (limit %d)", node, MAX_NODE_RANK);
    if (c->node_rank >= 0 && (uint32_t)c->node_rank != node)
        return reject(q, "heartbeat for node %u on the connection of node %d", node, c->node_rank);
    ds_store_server *s = q->s;
    pthread_mutex_lock(&s->lock);
    int rc = ds_store_heartbeat_fit(s, (int)node);
    if (rc == 0) {
        s->hb_ms[node] = ds_now_ms();
        if (c->node_rank < 0) {
            c->node_rank = (int)node;
            s->hb_owner[node] = c->id; /* a reconnecting agent takes the node over */
            ds_store_event_push(s, DS_STORE_EV_NODE_CONNECTED, (int)node, c->peer, "");
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) return reject(q, "out of memory for heartbeats");
    return ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
}

/* TAGGED: the inner request, answered with its tag. A malformed inner request is
 * answered ERROR: the connection carries other ranks' requests. */
static int do_tagged(request *q) {
    uint32_t tag;
    uint8_t op;
    if (q->tagged) return reject(q, "TAGGED inside TAGGED");
    if (ds_rd_u32(&q->body, &tag) != 0 || ds_rd_u8(&q->body, &op) != 0) return reject(q, "truncated TAGGED");
    q->tagged = 1;
    q->tag = tag;
    q->op = op;
    q->whole = q->body;
    ds_store_count(q->s, op);
    if (op == DS_STORE_OP_CANCEL) {
        ds_store_cancel(q->s, q->c, tag);
        return DONE;
    }
    int rc = ds_store_dispatch(q);
    if (rc != REJECT) return rc;
    pthread_mutex_lock(&q->s->lock);
    ds_store_event_push(q->s, DS_STORE_EV_CLIENT_REJECTED, q->c->node_rank, q->c->peer, q->why);
    pthread_mutex_unlock(&q->s->lock);
    return ds_store_reply(q, DS_STORE_ERROR, q->why, strlen(q->why), NULL, 0);
}

int ds_store_dispatch(request *q) {
    if (!q->c->authed && q->op != DS_STORE_OP_AUTH) return reject(q, "first frame is not AUTH (op %u)", q->op);
    switch (q->op) {
    case DS_STORE_OP_AUTH: return do_auth(q);
    case DS_STORE_OP_SET: return do_set(q);
    case DS_STORE_OP_GET: return do_get(q);
    case DS_STORE_OP_ADD: return do_add(q);
    case DS_STORE_OP_WAIT: return do_wait(q);
    case DS_STORE_OP_CHECK: return do_check(q);
    case DS_STORE_OP_DELETE: return do_delete(q);
    case DS_STORE_OP_HEARTBEAT: return do_heartbeat(q);
    case DS_STORE_OP_TAGGED: return do_tagged(q);
    case DS_STORE_OP_BARRIER: return ds_store_do_barrier(q);
    default: return reject(q, "unknown op %u", q->op);
    }
}
