/* The rendezvous store server: one thread, one poll loop, non-blocking sockets.
 *
 * A request that must wait (GET of a missing key, WAIT) stays in its client's input
 * buffer and is evaluated again whenever a key changes or its deadline passes, so a
 * blocked client costs nothing and never blocks another. One mutex guards what other
 * threads read or write (the map, heartbeats, events); the thread takes it per request. */
#include "store_server.h"
#include "store_map.h"
#include "ds_clock.h"
#include "ds_tcp.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define AUTH_TIMEOUT_MS 10000      /* default; DS_STORE_AUTH_TIMEOUT_MS overrides */
#define MAX_CLIENTS 2048           /* connections beyond are accepted and closed at once */
#define MAX_NODE_RANK 65535
#define READ_CHUNK (64 << 10)
#define READS_PER_TURN 16          /* fairness: at most 1 MiB from one client per turn */
#define OUT_HIGH_WATER (1 << 20)   /* stop taking requests from a client that is not reading */

typedef struct client {
    int fd;
    uint64_t id;
    char peer[64];
    int authed;
    int node_rank;        /* -1 until its first heartbeat */
    int64_t connected_ms;
    int blocked;          /* the request at the front of `in` waits for keys */
    int64_t deadline_ms;  /* of the blocked request; -1 forever */
    int dead;
    ds_buf in, out;
} client;

struct ds_store_server {
    int listen_fd, wake_fd, event_fd, port;
    int auth_timeout_ms;  /* a connection that has not sent AUTH by then is dropped */
    char token[DS_STORE_TOKEN_LEN];
    pthread_t thread;
    atomic_int stop;
    atomic_int changed;   /* a key was set since waiters were last evaluated */
    atomic_int nwaiting;  /* clients with c->blocked set */
    pthread_mutex_t lock; /* map, heartbeats, events, nclients */

    ds_store_map map;

    client **clients;
    int nclients, cap_clients, nauthed;
    uint64_t next_id;
    int64_t listen_pause_until;

    int64_t *hb_ms;        /* per node rank, -1 never */
    uint64_t *hb_owner;    /* client id whose loss means NODE_LOST */
    int nhb;

    ds_store_event *events; /* ring */
    int ev_head, ev_count, ev_cap;
    uint64_t ev_dropped;
};

/* ---- events and heartbeats (callers hold s->lock) ---------------------------------- */

static void event_push(ds_store_server *s, ds_store_event_kind kind, int node_rank,
                       const char *peer, const char *reason) {
    if (kind == DS_STORE_EV_CLIENT_REJECTED && s->ev_count >= DS_STORE_MAX_EVENTS) {
        s->ev_dropped++;
        return;
    }
    if (s->ev_count == s->ev_cap) {
        int cap = s->ev_cap ? s->ev_cap * 2 : 64;
        ds_store_event *ev = malloc((size_t)cap * sizeof *ev);
        if (!ev) return;
        for (int i = 0; i < s->ev_count; i++) ev[i] = s->events[(s->ev_head + i) % s->ev_cap];
        free(s->events);
        s->events = ev;
        s->ev_cap = cap;
        s->ev_head = 0;
    }
    ds_store_event *e = &s->events[(s->ev_head + s->ev_count) % s->ev_cap];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->node_rank = node_rank;
    e->time_ms = ds_now_ms();
    snprintf(e->peer, sizeof e->peer, "%s", peer);
    if (kind == DS_STORE_EV_CLIENT_REJECTED && s->ev_dropped > 0) {
        snprintf(e->reason, sizeof e->reason, "%s (and %" PRIu64 " rejections not queued)",
                 reason, s->ev_dropped);
        s->ev_dropped = 0;
    } else {
        snprintf(e->reason, sizeof e->reason, "%s", reason ? reason : "");
    }
    if (s->ev_count++ == 0) {
        uint64_t one = 1;
        if (write(s->event_fd, &one, sizeof one) < 0) { /* cannot fail: counter is 0 or 1 */ }
    }
}

static int heartbeat_table_fit(ds_store_server *s, int node) {
    if (node < s->nhb) return 0;
    int n = node + 1 > 2 * s->nhb ? node + 1 : 2 * s->nhb;
    int64_t *ms = realloc(s->hb_ms, (size_t)n * sizeof *ms);
    if (!ms) return -1;
    s->hb_ms = ms;
    uint64_t *own = realloc(s->hb_owner, (size_t)n * sizeof *own);
    if (!own) return -1;
    s->hb_owner = own;
    for (int i = s->nhb; i < n; i++) s->hb_ms[i] = -1, s->hb_owner[i] = 0;
    s->nhb = n;
    return 0;
}

/* ---- connections ------------------------------------------------------------------- */

static void peer_name(const struct sockaddr_storage *sa, socklen_t len, char *out, size_t cap) {
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo((const struct sockaddr *)sa, len, host, sizeof host, serv, sizeof serv,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, cap, "?");
        return;
    }
    snprintf(out, cap, sa->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, serv);
}

/* Marks c dead; the loop closes it. reason non-NULL: it was rejected. */
static void client_drop(ds_store_server *s, client *c, const char *reason) {
    if (c->dead) return;
    c->dead = 1;
    if (c->blocked) atomic_fetch_sub(&s->nwaiting, 1);
    c->blocked = 0;
    pthread_mutex_lock(&s->lock);
    if (reason) event_push(s, DS_STORE_EV_CLIENT_REJECTED, c->node_rank, c->peer, reason);
    if (c->node_rank >= 0 && c->node_rank < s->nhb && s->hb_owner[c->node_rank] == c->id) {
        s->hb_owner[c->node_rank] = 0;
        event_push(s, DS_STORE_EV_NODE_LOST, c->node_rank, c->peer,
                   reason ? reason : "connection closed");
    }
    if (c->authed) s->nauthed--;
    pthread_mutex_unlock(&s->lock);
}

static void client_free(client *c) {
    if (c->fd >= 0) close(c->fd);
    ds_buf_free(&c->in);
    ds_buf_free(&c->out);
    free(c);
}

static void accept_clients(ds_store_server *s) {
    for (;;) {
        struct sockaddr_storage sa = {0};
        socklen_t salen = sizeof sa;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* Out of fds: stop polling the socket a moment instead of spinning on it. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                s->listen_pause_until = ds_now_ms() + 100;
            return;
        }
        char peer[64];
        peer_name(&sa, salen, peer, sizeof peer);
        client *c = NULL;
        if (s->nclients < MAX_CLIENTS) {
            if (s->nclients == s->cap_clients) {
                int cap = s->cap_clients ? 2 * s->cap_clients : 64;
                client **cs = realloc(s->clients, (size_t)cap * sizeof *cs);
                if (cs) s->clients = cs, s->cap_clients = cap;
            }
            if (s->nclients < s->cap_clients) c = calloc(1, sizeof *c);
        }
        if (!c) {
            close(fd);
            pthread_mutex_lock(&s->lock);
            event_push(s, DS_STORE_EV_CLIENT_REJECTED, -1, peer,
                       s->nclients >= MAX_CLIENTS ? "too many connections" : "out of memory");
            pthread_mutex_unlock(&s->lock);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->id = ++s->next_id;
        c->node_rank = -1;
        c->connected_ms = ds_now_ms();
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        s->clients[s->nclients++] = c;
    }
}

/* ---- requests ---------------------------------------------------------------------- */

enum { DONE, BLOCKED, REJECT };

typedef struct request {
    ds_store_server *s;
    client *c;
    ds_reader body;
    char why[200]; /* REJECT: the reason */
} request;

static int reply(request *q, uint8_t status, const void *a, size_t alen, const void *b, size_t blen) {
    ds_buf *o = &q->c->out;
    size_t start = ds_buf_unread(o);
    if (ds_frame_begin(o, status) != 0 || ds_buf_put(o, a, alen) != 0 || ds_buf_put(o, b, blen) != 0) {
        snprintf(q->why, sizeof q->why, "out of memory replying");
        return REJECT;
    }
    ds_frame_end(o, start);
    return DONE;
}

static int reply_u8(request *q, uint8_t v) { return reply(q, DS_STORE_OK, &v, 1, NULL, 0); }

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

/* GET and WAIT: decides between waiting longer and timing out. */
static int block_or_timeout(request *q, int32_t timeout_ms) {
    client *c = q->c;
    int64_t now = ds_now_ms();
    if (!c->blocked) {
        c->blocked = 1;
        atomic_fetch_add(&q->s->nwaiting, 1);
        c->deadline_ms = timeout_ms < 0 ? -1 : now + timeout_ms;
    }
    if (c->deadline_ms >= 0 && now >= c->deadline_ms) return reply(q, DS_STORE_TIMEOUT, NULL, 0, NULL, 0);
    return BLOCKED;
}

static int do_auth(request *q) {
    uint32_t version;
    const uint8_t *tok;
    if (q->c->authed) return reject(q, "second AUTH frame");
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
    return reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
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
    atomic_store(&q->s->changed, 1);
    return reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
}

static int do_get(request *q) {
    uint32_t t;
    const uint8_t *key = NULL;
    size_t klen = 0;
    if (ds_rd_u32(&q->body, &t) != 0) return reject(q, "truncated GET");
    if (read_key(q, 0, &key, &klen) != DONE) return REJECT;
    pthread_mutex_lock(&q->s->lock);
    ds_store_entry *e = ds_store_map_get(&q->s->map, key, klen);
    int rc = e ? reply(q, DS_STORE_OK, e->val, e->vlen, NULL, 0) : -1;
    pthread_mutex_unlock(&q->s->lock);
    return rc >= 0 ? rc : block_or_timeout(q, (int32_t)t);
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
    if (msg[0]) return reply(q, DS_STORE_ERROR, msg, strlen(msg), NULL, 0);
    atomic_store(&q->s->changed, 1);
    uint8_t be[8];
    ds_store_u32(be, (uint32_t)((uint64_t)cur >> 32));
    ds_store_u32(be + 4, (uint32_t)cur);
    return reply(q, DS_STORE_OK, be, 8, NULL, 0);
}

/* WAIT and CHECK: *all = 1 when every listed key exists. Validates the whole list. */
static int keys_exist(request *q, int *all) {
    uint32_t n;
    if (ds_rd_u32(&q->body, &n) != 0) return reject(q, "truncated key count");
    if (n == 0 || n > DS_STORE_MAX_KEYS) return reject(q, "%u keys (1..%d allowed)", n, DS_STORE_MAX_KEYS);
    *all = 1;
    pthread_mutex_lock(&q->s->lock);
    int rc = DONE;
    for (uint32_t i = 0; i < n && rc == DONE; i++) {
        const uint8_t *key = NULL;
        size_t klen = 0;
        rc = read_key(q, 1, &key, &klen);
        if (rc == DONE && *all && !ds_store_map_get(&q->s->map, key, klen)) *all = 0;
    }
    pthread_mutex_unlock(&q->s->lock);
    if (rc == DONE && q->body.n != 0) rc = reject(q, "trailing bytes after the key list");
    return rc;
}

static int do_wait(request *q) {
    uint32_t t;
    int all = 0;
    if (ds_rd_u32(&q->body, &t) != 0) return reject(q, "truncated WAIT");
    if (keys_exist(q, &all) != DONE) return REJECT;
    return all ? reply(q, DS_STORE_OK, NULL, 0, NULL, 0) : block_or_timeout(q, (int32_t)t);
}

static int do_check(request *q) {
    int all = 0;
    if (keys_exist(q, &all) != DONE) return REJECT;
    return reply_u8(q, (uint8_t)all);
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
    int rc = heartbeat_table_fit(s, (int)node);
    if (rc == 0) {
        s->hb_ms[node] = ds_now_ms();
        if (c->node_rank < 0) {
            c->node_rank = (int)node;
            s->hb_owner[node] = c->id; /* a reconnecting agent takes the node over */
            event_push(s, DS_STORE_EV_NODE_CONNECTED, (int)node, c->peer, "");
        }
    }
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) return reject(q, "out of memory for heartbeats");
    return reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
}

static int dispatch(request *q, uint8_t op) {
    if (!q->c->authed && op != DS_STORE_OP_AUTH) return reject(q, "first frame is not AUTH (op %u)", op);
    switch (op) {
    case DS_STORE_OP_AUTH: return do_auth(q);
    case DS_STORE_OP_SET: return do_set(q);
    case DS_STORE_OP_GET: return do_get(q);
    case DS_STORE_OP_ADD: return do_add(q);
    case DS_STORE_OP_WAIT: return do_wait(q);
    case DS_STORE_OP_CHECK: return do_check(q);
    case DS_STORE_OP_DELETE: return do_delete(q);
    case DS_STORE_OP_HEARTBEAT: return do_heartbeat(q);
    default: return reject(q, "unknown op %u", op);
    }
}

/* Serves the complete frames at the front of c->in, stopping at one that blocks. */
static void serve_frames(ds_store_server *s, client *c) {
    while (!c->dead && ds_buf_unread(&c->out) < OUT_HIGH_WATER) {
        size_t avail = ds_buf_unread(&c->in);
        if (avail < 4) return;
        const uint8_t *f = ds_buf_head(&c->in);
        uint32_t len = ds_load_u32(f);
        uint32_t limit = c->authed ? DS_STORE_MAX_FRAME : DS_STORE_AUTH_FRAME;
        if (len == 0 || len > limit) {
            char why[160];
            if (!c->authed)
                snprintf(why, sizeof why, "first frame (%u bytes) is not AUTH", len);
            else
                snprintf(why, sizeof why, "frame of %u bytes (limit %u: value over %u bytes?)",
                         len, (unsigned)DS_STORE_MAX_FRAME, DS_STORE_MAX_VALUE);
            client_drop(s, c, why);
            return;
        }
        if (avail < 4 + (size_t)len) return;
        request q = {.s = s, .c = c, .body = {f + 5, len - 1}};
        int rc = dispatch(&q, f[4]);
        if (rc == REJECT) {
            client_drop(s, c, q.why);
            return;
        }
        if (rc == BLOCKED) return;
        if (c->blocked) atomic_fetch_sub(&s->nwaiting, 1);
        c->blocked = 0;
        ds_buf_consume(&c->in, 4 + (size_t)len);
    }
}

/* ---- I/O --------------------------------------------------------------------------- */

static void flush_out(ds_store_server *s, client *c) {
    while (!c->dead && ds_buf_unread(&c->out) > 0) {
        ssize_t n = send(c->fd, ds_buf_head(&c->out), ds_buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            ds_buf_consume(&c->out, (size_t)n);
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
            client_drop(s, c, NULL);
        }
    }
}

static void read_in(ds_store_server *s, client *c) {
    for (int i = 0; i < READS_PER_TURN && !c->dead && !c->blocked; i++) {
        /* Before AUTH read no more than an AUTH frame: unknown peers cost ~nothing. */
        size_t chunk = c->authed ? READ_CHUNK : 4 + DS_STORE_AUTH_FRAME;
        if (ds_buf_reserve(&c->in, chunk) != 0) {
            client_drop(s, c, "out of memory reading");
            return;
        }
        ssize_t n = recv(c->fd, c->in.data + c->in.len, chunk, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            serve_frames(s, c);
        } else if (n == 0) {
            client_drop(s, c, NULL);
        } else if (errno != EINTR) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) client_drop(s, c, NULL);
            return;
        }
    }
}

/* Sends what it can and serves the requests that were held back while answers piled
 * up, until neither makes progress: no complete request is left waiting for input that
 * will never come. */
static void pump(ds_store_server *s, client *c) {
    for (;;) {
        flush_out(s, c);
        size_t before = ds_buf_unread(&c->in);
        serve_frames(s, c);
        if (c->dead || ds_buf_unread(&c->in) == before) break;
    }
    flush_out(s, c);
}

static int wants_input(const client *c) { return !c->blocked && ds_buf_unread(&c->out) < OUT_HIGH_WATER; }

/* Evaluates blocked requests again (a key changed or a deadline passed), drops clients
 * that never authenticated, and returns the poll timeout until the next deadline. */
static int revisit(ds_store_server *s) {
    int changed = atomic_exchange(&s->changed, 0);
    int64_t now = ds_now_ms(), next = -1;
    for (int i = 0; i < s->nclients; i++) {
        client *c = s->clients[i];
        if (c->dead) continue;
        if (!c->authed) {
            int64_t due = c->connected_ms + s->auth_timeout_ms;
            if (now >= due) {
                char why[64];
                snprintf(why, sizeof why, "no AUTH within %g s", s->auth_timeout_ms / 1000.0);
                client_drop(s, c, why);
                continue;
            }
            if (next < 0 || due < next) next = due;
        }
        if (!c->blocked) continue;
        if (changed || (c->deadline_ms >= 0 && now >= c->deadline_ms)) pump(s, c);
        if (c->blocked && c->deadline_ms >= 0 && (next < 0 || c->deadline_ms < next)) next = c->deadline_ms;
    }
    if (atomic_load(&s->changed)) return 0;
    if (s->listen_pause_until > now && (next < 0 || s->listen_pause_until < next)) next = s->listen_pause_until;
    if (next < 0) return -1;
    return next > now ? (int)(next - now) : 0;
}

static void reap(ds_store_server *s) {
    int j = 0;
    for (int i = 0; i < s->nclients; i++) {
        if (s->clients[i]->dead) client_free(s->clients[i]);
        else s->clients[j++] = s->clients[i];
    }
    s->nclients = j;
}

static void *server_main(void *arg) {
    ds_store_server *s = arg;
    pthread_setname_np(pthread_self(), "ds-store"); /* its CPU time apart in /proc (bench/scale) */
    struct pollfd *pfd = NULL;
    int pcap = 0;
    while (!atomic_load(&s->stop)) {
        int timeout = revisit(s);
        reap(s);
        int n = s->nclients + 2;
        if (n > pcap) {
            struct pollfd *p = realloc(pfd, (size_t)n * sizeof *p);
            if (p) {
                pfd = p;
                pcap = n;
            } else if (pcap >= 2) { /* out of memory: serve those that fit, retry soon */
                n = pcap;
                timeout = 100;
            } else {
                poll(NULL, 0, 100);
                continue;
            }
        }
        int listening = ds_now_ms() >= s->listen_pause_until;
        pfd[0] = (struct pollfd){.fd = listening ? s->listen_fd : -1, .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->wake_fd, .events = POLLIN};
        for (int i = 2; i < n; i++) {
            client *c = s->clients[i - 2];
            short ev = POLLRDHUP;
            if (wants_input(c)) ev |= POLLIN;
            if (ds_buf_unread(&c->out) > 0) ev |= POLLOUT;
            pfd[i] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        if (poll(pfd, (nfds_t)n, timeout) < 0) continue; /* EINTR */
        if (pfd[1].revents & POLLIN) {
            uint64_t v;
            if (read(s->wake_fd, &v, sizeof v) < 0) { /* EAGAIN: someone else drained it */ }
        }
        for (int i = 2; i < n; i++) {
            client *c = s->clients[i - 2];
            short re = pfd[i].revents;
            if (!re) continue;
            if (re & POLLOUT) pump(s, c);
            if (re & (POLLIN | POLLHUP | POLLERR)) read_in(s, c);
            /* A blocked client that hangs up will never read its answer. */
            if ((re & (POLLRDHUP | POLLHUP | POLLERR)) && !c->dead && (c->blocked || !wants_input(c)))
                client_drop(s, c, NULL);
            pump(s, c);
        }
        if (pfd[0].revents & POLLIN) accept_clients(s);
    }
    free(pfd);
    return NULL;
}

/* ---- public API -------------------------------------------------------------------- */

int ds_store_server_start(const char *addr, int port, const char *token,
                          ds_store_server **out, ds_err *err) {
    *out = NULL;
    if (!ds_store_token_valid(token)) return ds_err_set(err, "store: the token must be 64 hex chars");
    if (port < 0 || port > 65535) return ds_err_set(err, "store: port %d out of range 0..65535", port);
    int auth_ms = AUTH_TIMEOUT_MS;
    const char *env = getenv("DS_STORE_AUTH_TIMEOUT_MS");
    if (env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*env == '\0' || *end || v < 1 || v > 3600000)
            return ds_err_set(err, "store: DS_STORE_AUTH_TIMEOUT_MS=%.40s: expected milliseconds 1..3600000", env);
        auth_ms = (int)v;
    }
    ds_store_server *s = calloc(1, sizeof *s);
    if (!s) return ds_err_set(err, "store: out of memory");
    s->auth_timeout_ms = auth_ms;
    s->listen_fd = s->wake_fd = s->event_fd = -1;
    memcpy(s->token, token, DS_STORE_TOKEN_LEN);
    pthread_mutex_init(&s->lock, NULL);
    int map_rc = ds_store_map_init(&s->map);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (map_rc != 0 || s->wake_fd < 0 || s->event_fd < 0) {
        ds_err_errno(err, errno, "store: setting up");
        goto fail;
    }
    s->listen_fd = ds_tcp_listen("store", addr, port, &s->port, err);
    if (s->listen_fd < 0) goto fail;
    /* The controller handles signals in its own loop (signalfd or handlers): the server
     * thread must never be the one a process-directed signal lands on. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&s->thread, NULL, server_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        ds_err_errno(err, rc, "store: starting its thread");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->wake_fd >= 0) close(s->wake_fd);
    if (s->event_fd >= 0) close(s->event_fd);
    ds_store_map_free(&s->map);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return -1;
}

int ds_store_server_port(const ds_store_server *srv) { return srv->port; }

static void wake(ds_store_server *s) {
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* counter saturated: already awake */ }
}

void ds_store_server_stop(ds_store_server *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    wake(s);
    pthread_join(s->thread, NULL);
    for (int i = 0; i < s->nclients; i++) client_free(s->clients[i]);
    free(s->clients);
    close(s->listen_fd);
    close(s->wake_fd);
    close(s->event_fd);
    ds_store_map_free(&s->map);
    free(s->hb_ms);
    free(s->hb_owner);
    free(s->events);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

int ds_store_server_event_fd(const ds_store_server *srv) { return srv->event_fd; }

int ds_store_server_next_event(ds_store_server *s, ds_store_event *ev) {
    pthread_mutex_lock(&s->lock);
    int got = s->ev_count > 0;
    if (got) {
        *ev = s->events[s->ev_head];
        s->ev_head = (s->ev_head + 1) % s->ev_cap;
        if (--s->ev_count == 0) {
            uint64_t v;
            if (read(s->event_fd, &v, sizeof v) < 0) { /* already 0 */ }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return got;
}

int64_t ds_store_server_last_heartbeat_ms(ds_store_server *s, int node_rank) {
    pthread_mutex_lock(&s->lock);
    int64_t ms = node_rank >= 0 && node_rank < s->nhb ? s->hb_ms[node_rank] : -1;
    pthread_mutex_unlock(&s->lock);
    return ms;
}

int ds_store_server_set(ds_store_server *s, const char *key, const void *val, size_t len, ds_err *err) {
    size_t klen = strlen(key);
    const char *bad = ds_store_key_problem((const uint8_t *)key, klen);
    if (bad) return ds_err_set(err, "store: set '%.80s': %s", key, bad);
    if (len > DS_STORE_MAX_VALUE)
        return ds_err_set(err, "store: set '%.80s': value of %zu bytes over the %u-byte limit", key, len,
                          DS_STORE_MAX_VALUE);
    uint8_t *v = malloc(len ? len : 1);
    if (!v) return ds_err_set(err, "store: set '%.80s': out of memory", key);
    if (len) memcpy(v, val, len);
    pthread_mutex_lock(&s->lock);
    int rc = ds_store_map_put(&s->map, key, klen, v, len);
    pthread_mutex_unlock(&s->lock);
    if (rc != 0) {
        free(v);
        return ds_err_set(err, "store: set '%.80s': out of memory", key);
    }
    atomic_store(&s->changed, 1);
    wake(s);
    return 0;
}

int ds_store_server_nclients(ds_store_server *s) {
    pthread_mutex_lock(&s->lock);
    int n = s->nauthed;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int ds_store_server_nwaiting(ds_store_server *s) { return atomic_load(&s->nwaiting); }
