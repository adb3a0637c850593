/* Client of the rendezvous store: one connection, one request at a time, every wait
 * bounded by poll. A request the client gave up on (local timeout, I/O error) leaves
 * the stream out of step, so the client is then "broken" and every later call fails
 * with the first error instead of reading someone else's answer. */
#include "store_client.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "store_proto.h"
#include "store_token.h"
#include "ds_clock.h"
#include "ds_tcp.h"

/* Server-side waits end on the server's clock; the client waits this much longer for
 * the answer before deciding the server is gone. */
#define REPLY_SLACK_MS 5000
/* Bound for requests that never wait on keys (set, add, check, ...). */
#define IO_TIMEOUT_MS 60000
#define MAX_PREFIX 256

struct ds_store_client {
    int fd;
    char where[300];         /* "host:port" for messages */
    char prefix[MAX_PREFIX]; /* prepended to every key */
    char broken[512];        /* first fatal error; later calls repeat it */
    ds_buf out, in;          /* request being sent; body of the last response */
};

static int64_t remaining(int64_t deadline) {
    if (deadline < 0) return -1;
    int64_t r = deadline - ds_now_ms();
    return r > 0 ? r : 0;
}

static int64_t deadline_after(int timeout_ms) {
    return timeout_ms < 0 ? -1 : ds_now_ms() + timeout_ms;
}

static void seconds(char *out, size_t cap, int ms) { snprintf(out, cap, "%g s", ms / 1000.0); }

/* ---- one request ------------------------------------------------------------------- */

static int fail(ds_store_client *c, ds_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ds_store_client *c, ds_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->broken, sizeof c->broken, fmt, ap);
    va_end(ap);
    return ds_err_set(err, "%s", c->broken);
}

static int wait_fd(int fd, short ev, int64_t deadline) {
    struct pollfd p = {.fd = fd, .events = ev};
    int rc;
    int64_t left;
    while ((left = remaining(deadline), rc = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left)) < 0 &&
           errno == EINTR) {}
    return rc; /* 0: deadline passed */
}

static int send_all(ds_store_client *c, int64_t deadline, const char *what, ds_err *err) {
    size_t off = 0;
    while (off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + off, c->out.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(c->fd, POLLOUT, deadline) == 0)
                return fail(c, err, "%s to %s: timed out sending", what, c->where);
        } else if (!(n < 0 && errno == EINTR)) {
            return fail(c, err, "%s to %s: connection lost: %s", what, c->where, strerror(errno));
        }
    }
    return 0;
}

static int recv_exact(ds_store_client *c, uint8_t *p, size_t n, int64_t deadline,
                      const char *what, ds_err *err) {
    while (n > 0) {
        ssize_t r = recv(c->fd, p, n, 0);
        if (r > 0) {
            p += r;
            n -= (size_t)r;
        } else if (r == 0) {
            return fail(c, err, "%s from %s: the store closed the connection", what, c->where);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(c->fd, POLLIN, deadline) == 0)
                return fail(c, err, "%s from %s: no answer from the store", what, c->where);
        } else if (errno != EINTR) {
            return fail(c, err, "%s from %s: connection lost: %s", what, c->where, strerror(errno));
        }
    }
    return 0;
}

/* Sends c->out, reads the answer into c->in; returns its status (OK, TIMEOUT) or -1.
 * ERROR answers become -1 with the server's message. wait_ms: how long the server may
 * hold the request (-1 forever). */
static int roundtrip(ds_store_client *c, int wait_ms, const char *what, ds_err *err) {
    if (c->broken[0]) return ds_err_set(err, "%s: store client unusable after: %s", what, c->broken);
    int64_t deadline = wait_ms < 0 ? -1 : ds_now_ms() + wait_ms + REPLY_SLACK_MS;
    if (send_all(c, deadline, what, err) != 0) return -1;
    uint8_t hdr[5];
    if (recv_exact(c, hdr, 5, deadline, what, err) != 0) return -1;
    uint32_t len = ds_load_u32(hdr);
    if (len == 0 || len > DS_STORE_MAX_FRAME)
        return fail(c, err, "%s from %s: malformed answer (%u bytes)", what, c->where, len);
    ds_buf_clear(&c->in);
    if (ds_buf_reserve(&c->in, len) != 0) /* body (len - 1) + 1 spare byte for get's NUL */
        return fail(c, err, "%s from %s: out of memory for %u bytes", what, c->where, len);
    if (recv_exact(c, c->in.data, len - 1, deadline, what, err) != 0) return -1;
    c->in.len = len - 1;
    if (hdr[4] == DS_STORE_ERROR)
        return ds_err_set(err, "%s at %s: %.*s", what, c->where, (int)(c->in.len < 500 ? c->in.len : 500),
                          (const char *)c->in.data);
    if (hdr[4] != DS_STORE_OK && hdr[4] != DS_STORE_TIMEOUT)
        return fail(c, err, "%s from %s: unknown answer status %u", what, c->where, hdr[4]);
    return hdr[4];
}

/* Starts a request frame in c->out. */
static int begin(ds_store_client *c, uint8_t op) {
    ds_buf_clear(&c->out);
    return ds_frame_begin(&c->out, op);
}

/* Appends prefix+key, u32-length-prefixed or as the rest of the frame. */
static int put_key(ds_store_client *c, const char *key, int prefixed, const char *what, ds_err *err) {
    size_t plen = strlen(c->prefix), klen = strlen(key);
    if (klen == 0) return ds_err_set(err, "%s at %s: empty key", what, c->where);
    if (plen + klen > DS_STORE_MAX_KEY)
        return ds_err_set(err, "%s '%.80s...' at %s: key of %zu bytes over the %d-byte limit", what, key,
                          c->where, plen + klen, DS_STORE_MAX_KEY);
    int rc = 0;
    if (prefixed) rc |= ds_buf_put_u32(&c->out, (uint32_t)(plen + klen));
    rc |= ds_buf_put(&c->out, c->prefix, plen);
    rc |= ds_buf_put(&c->out, key, klen);
    return rc ? ds_err_set(err, "%s at %s: out of memory", what, c->where) : 0;
}

/* ---- API --------------------------------------------------------------------------- */

/* Presents the token on c's fresh connection; frees c and returns NULL when refused. */
static ds_store_client *authenticate(ds_store_client *c, const char *token, int64_t deadline, ds_err *err) {
    int rc = -1;
    if (begin(c, DS_STORE_OP_AUTH) == 0 && ds_buf_put_u32(&c->out, DS_STORE_VERSION) == 0 &&
        ds_buf_put(&c->out, token, DS_STORE_TOKEN_LEN) == 0) {
        ds_frame_end(&c->out, 0);
        rc = send_all(c, deadline, "auth", err) == 0 ? 0 : -1;
        uint8_t hdr[5];
        if (rc == 0 && recv_exact(c, hdr, 5, deadline, "auth", err) != 0) rc = -1;
        if (rc == 0 && hdr[4] == DS_STORE_ERROR) {
            /* The server says why it will not serve us (wrong token, too many connections). */
            char why[256] = "";
            uint32_t n = ds_load_u32(hdr) - 1;
            if (n >= sizeof why) n = sizeof why - 1;
            ds_err ignored;
            if (recv_exact(c, (uint8_t *)why, n, deadline, "auth", &ignored) != 0) why[0] = 0;
            why[n] = 0;
            ds_err_set(err, "store %s refused this client: %s", c->where, why[0] ? why : "(no reason given)");
            ds_store_close(c);
            return NULL;
        }
        if (rc == 0 && (ds_load_u32(hdr) != 1 || hdr[4] != DS_STORE_OK))
            rc = ds_err_set(err, "auth at %s: unexpected answer", c->where);
    } else {
        ds_err_set(err, "auth at %s: out of memory", c->where);
    }
    if (rc != 0) {
        if (strstr(err ? err->msg : "", "closed the connection"))
            ds_err_set(err, "store %s refused this client (wrong token, protocol version or too many "
                            "connections: the controller's launcher.log says which)", c->where);
        ds_store_close(c);
        return NULL;
    }
    return c;
}

static ds_store_client *client_new(const char *token, const char *where, ds_err *err) {
    if (!ds_store_token_valid(token)) {
        ds_err_set(err, "store %s: the token must be 64 hex chars", where);
        return NULL;
    }
    ds_store_client *c = calloc(1, sizeof *c);
    if (!c) {
        ds_err_set(err, "store %s: out of memory", where);
        return NULL;
    }
    snprintf(c->where, sizeof c->where, "%s", where);
    return c;
}

ds_store_client *ds_store_connect(const char *host, int port, const char *token, int timeout_ms, ds_err *err) {
    char where[300];
    snprintf(where, sizeof where, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
    ds_store_client *c = client_new(token, where, err);
    if (!c) return NULL;
    int64_t deadline = deadline_after(timeout_ms);
    c->fd = ds_tcp_connect("store", host, port, deadline, err);
    if (c->fd < 0) {
        free(c);
        return NULL;
    }
    return authenticate(c, token, deadline, err);
}

/* The agent may not listen yet when its first rank starts: refused or missing sockets
 * are tried again until the deadline. */
ds_store_client *ds_store_connect_unix(const char *path, const char *where, const char *token, int timeout_ms,
                                       ds_err *err) {
    ds_store_client *c = client_new(token, where, err);
    if (!c) return NULL;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof sa.sun_path) {
        free(c);
        ds_err_set(err, "store socket '%.100s': not a socket name", path);
        return NULL;
    }
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@') sa.sun_path[0] = 0; /* abstract: no file to clean up */
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    int64_t deadline = deadline_after(timeout_ms);
    for (;;) {
        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (c->fd >= 0 && connect(c->fd, (struct sockaddr *)&sa, len) == 0) break;
        int e = errno;
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        if ((e != ECONNREFUSED && e != ENOENT && e != EAGAIN) || remaining(deadline) == 0) {
            ds_err_errno(err, e, "store %s: connecting to this node's agent at %s", where, path);
            free(c);
            return NULL;
        }
        poll(NULL, 0, 10);
    }
    return authenticate(c, token, deadline, err);
}

ds_store_client *ds_store_connect_rank(const char *rdzv, const char *token, int timeout_ms, ds_err *err) {
    const char *via = getenv("DS_STORE_SOCKET");
    if (via && via[0]) return ds_store_connect_unix(via, rdzv, token, timeout_ms, err);
    char host[256];
    int port = 0;
    if (ds_store_split_addr(rdzv, host, sizeof host, &port, err) != 0) return NULL;
    return ds_store_connect(host, port, token, timeout_ms, err);
}

void ds_store_close(ds_store_client *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    ds_buf_free(&c->out);
    ds_buf_free(&c->in);
    free(c);
}

int ds_store_set_prefix(ds_store_client *c, const char *prefix, ds_err *err) {
    if (strlen(prefix) >= MAX_PREFIX)
        return ds_err_set(err, "store %s: prefix '%.40s...' longer than %d bytes", c->where, prefix, MAX_PREFIX - 1);
    snprintf(c->prefix, sizeof c->prefix, "%s", prefix);
    return 0;
}

const char *ds_store_where(const ds_store_client *c) { return c->where; }

int ds_store_split_addr(const char *addr, char *host, size_t cap, int *port, ds_err *err) {
    const char *colon = strrchr(addr, ':');
    char *end;
    long p = colon ? strtol(colon + 1, &end, 10) : 0;
    if (!colon || colon == addr || *end || end == colon + 1 || p < 1 || p > 65535)
        return ds_err_set(err, "'%s' is not host:port", addr);
    const char *h = addr;
    size_t n = (size_t)(colon - addr);
    if (h[0] == '[' && h[n - 1] == ']') h++, n -= 2;
    if (n == 0 || n >= cap) return ds_err_set(err, "'%s' is not host:port", addr);
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

int ds_store_fd(const ds_store_client *c) { return c->fd; }

int ds_store_set(ds_store_client *c, const char *key, const void *val, size_t len, ds_err *err) {
    char what[512];
    snprintf(what, sizeof what, "set '%s%.200s'", c->prefix, key);
    if (len > DS_STORE_MAX_VALUE)
        return ds_err_set(err, "%s at %s: value of %zu bytes over the %u-byte limit", what, c->where, len,
                          DS_STORE_MAX_VALUE);
    if (begin(c, DS_STORE_OP_SET) != 0 || put_key(c, key, 1, what, err) != 0) return -1;
    if (ds_buf_put(&c->out, val, len) != 0) return ds_err_set(err, "%s: out of memory", what);
    ds_frame_end(&c->out, 0);
    return roundtrip(c, IO_TIMEOUT_MS, what, err) == DS_STORE_OK ? 0 : -1;
}

int ds_store_get(ds_store_client *c, const char *key, void **val, size_t *len, int timeout_ms, ds_err *err) {
    char what[512], t[32];
    snprintf(what, sizeof what, "get '%s%.200s'", c->prefix, key);
    *val = NULL;
    *len = 0;
    if (begin(c, DS_STORE_OP_GET) != 0 || ds_buf_put_u32(&c->out, (uint32_t)(timeout_ms < 0 ? -1 : timeout_ms)) != 0)
        return ds_err_set(err, "%s: out of memory", what);
    if (put_key(c, key, 0, what, err) != 0) return -1;
    ds_frame_end(&c->out, 0);
    int rc = roundtrip(c, timeout_ms, what, err);
    if (rc < 0) return -1;
    seconds(t, sizeof t, timeout_ms);
    if (rc == DS_STORE_TIMEOUT) return ds_err_set(err, "%s from %s: timed out after %s", what, c->where, t);
    /* The answer's buffer becomes the caller's: no copy of a large value, and the client
     * does not keep a 64 MiB buffer after one large get. roundtrip reserved one byte
     * more than the value: room for a NUL, so string values can be used as they are. */
    c->in.data[c->in.len] = '\0';
    *val = c->in.data;
    *len = c->in.len;
    memset(&c->in, 0, sizeof c->in);
    return 0;
}

int ds_store_add(ds_store_client *c, const char *key, int64_t delta, int64_t *result, ds_err *err) {
    char what[512];
    snprintf(what, sizeof what, "add to '%s%.200s'", c->prefix, key);
    if (begin(c, DS_STORE_OP_ADD) != 0 || ds_buf_put_u64(&c->out, (uint64_t)delta) != 0 ||
        put_key(c, key, 0, what, err) != 0)
        return -1;
    ds_frame_end(&c->out, 0);
    if (roundtrip(c, IO_TIMEOUT_MS, what, err) != DS_STORE_OK) return -1;
    uint64_t v;
    ds_reader r = {c->in.data, c->in.len};
    if (ds_rd_u64(&r, &v) != 0) return fail(c, err, "%s from %s: malformed answer", what, c->where);
    if (result) *result = (int64_t)v;
    return 0;
}

static int put_keys(ds_store_client *c, const char *const *keys, int nkeys, const char *what, ds_err *err) {
    if (nkeys <= 0 || nkeys > DS_STORE_MAX_KEYS)
        return ds_err_set(err, "%s at %s: %d keys (1..%d allowed)", what, c->where, nkeys, DS_STORE_MAX_KEYS);
    if (ds_buf_put_u32(&c->out, (uint32_t)nkeys) != 0) return ds_err_set(err, "%s: out of memory", what);
    for (int i = 0; i < nkeys; i++)
        if (put_key(c, keys[i], 1, what, err) != 0) return -1;
    return 0;
}

static void keys_what(char *what, size_t cap, const char *verb, const ds_store_client *c,
                      const char *const *keys, int nkeys) {
    int n = snprintf(what, cap, "%s ", verb);
    for (int i = 0; i < nkeys && n < (int)cap - 1; i++)
        n += snprintf(what + n, cap - (size_t)n, "%s'%s%s'", i ? ", " : "", c->prefix, keys[i]);
    if (n >= (int)cap - 1 && cap > 5) strcpy(what + cap - 5, "...");
}

static int wait_some(ds_store_client *c, const char *const *keys, int nkeys, int timeout_ms, ds_err *err) {
    char what[300], t[32];
    keys_what(what, sizeof what, "wait for", c, keys, nkeys);
    if (begin(c, DS_STORE_OP_WAIT) != 0 || ds_buf_put_u32(&c->out, (uint32_t)(timeout_ms < 0 ? -1 : timeout_ms)) != 0)
        return ds_err_set(err, "%s: out of memory", what);
    if (put_keys(c, keys, nkeys, what, err) != 0) return -1;
    ds_frame_end(&c->out, 0);
    int rc = roundtrip(c, timeout_ms, what, err);
    if (rc < 0) return -1;
    seconds(t, sizeof t, timeout_ms);
    if (rc == DS_STORE_TIMEOUT) return ds_err_set(err, "%s at %s: timed out after %s", what, c->where, t);
    return 0;
}

/* The store takes at most DS_STORE_MAX_KEYS keys per WAIT: more are waited for in turns,
 * each with what is left of the timeout (keys are never taken back by a wait, so all
 * existing at the end of the last turn is all existing). */
int ds_store_wait(ds_store_client *c, const char *const *keys, int nkeys, int timeout_ms, ds_err *err) {
    int64_t deadline = timeout_ms < 0 ? 0 : ds_now_ms() + timeout_ms;
    for (int at = 0;;) {
        int n = nkeys - at < DS_STORE_MAX_KEYS ? nkeys - at : DS_STORE_MAX_KEYS;
        int left = timeout_ms;
        if (timeout_ms >= 0) {
            int64_t l = deadline - ds_now_ms();
            left = l > 0 ? (int)l : 0;
        }
        if (wait_some(c, keys + at, n, left, err) != 0) return -1;
        if ((at += n) >= nkeys) return 0;
    }
}

static int check_some(ds_store_client *c, const char *const *keys, int nkeys, int *exists, ds_err *err) {
    char what[300];
    keys_what(what, sizeof what, "check", c, keys, nkeys);
    if (begin(c, DS_STORE_OP_CHECK) != 0) return ds_err_set(err, "%s: out of memory", what);
    if (put_keys(c, keys, nkeys, what, err) != 0) return -1;
    ds_frame_end(&c->out, 0);
    if (roundtrip(c, IO_TIMEOUT_MS, what, err) != DS_STORE_OK) return -1;
    if (c->in.len != 1) return fail(c, err, "%s at %s: malformed answer", what, c->where);
    *exists = c->in.data[0] != 0;
    return 0;
}

int ds_store_check(ds_store_client *c, const char *const *keys, int nkeys, int *exists, ds_err *err) {
    if (nkeys <= 0) return check_some(c, keys, nkeys, exists, err); /* refused, with why */
    *exists = 1;
    for (int at = 0; at < nkeys && *exists; at += DS_STORE_MAX_KEYS) {
        int n = nkeys - at < DS_STORE_MAX_KEYS ? nkeys - at : DS_STORE_MAX_KEYS;
        if (check_some(c, keys + at, n, exists, err) != 0) return -1;
    }
    return 0;
}

int ds_store_delete(ds_store_client *c, const char *key, int *deleted, ds_err *err) {
    char what[512];
    snprintf(what, sizeof what, "delete '%s%.200s'", c->prefix, key);
    if (begin(c, DS_STORE_OP_DELETE) != 0 || put_key(c, key, 0, what, err) != 0) return -1;
    ds_frame_end(&c->out, 0);
    if (roundtrip(c, IO_TIMEOUT_MS, what, err) != DS_STORE_OK) return -1;
    if (c->in.len != 1) return fail(c, err, "%s at %s: malformed answer", what, c->where);
    if (deleted) *deleted = c->in.data[0] != 0;
    return 0;
}

/* A BARRIER frame: timeout, world, the ranks, then prefix+key as the rest. */
static int put_barrier(ds_store_client *c, const char *key, int world, const int *ranks, int n, int timeout_ms,
                       const char *what, ds_err *err) {
    if (world < 1 || world > DS_STORE_MAX_BARRIER_WORLD)
        return ds_err_set(err, "%s: a world of %d (1..%d allowed)", what, world, DS_STORE_MAX_BARRIER_WORLD);
    int bad = begin(c, DS_STORE_OP_BARRIER) | ds_buf_put_u32(&c->out, (uint32_t)(timeout_ms < 0 ? -1 : timeout_ms)) |
              ds_buf_put_u32(&c->out, (uint32_t)world) | ds_buf_put_u32(&c->out, (uint32_t)n);
    for (int i = 0; i < n; i++) bad |= ds_buf_put_u32(&c->out, (uint32_t)ranks[i]);
    if (bad) return ds_err_set(err, "%s: out of memory", what);
    if (put_key(c, key, 0, what, err) != 0) return -1;
    ds_frame_end(&c->out, 0);
    return 0;
}

int ds_store_barrier_arrive(ds_store_client *c, const char *key, int rank, int world, int timeout_ms, ds_err *err) {
    char what[512];
    snprintf(what, sizeof what, "barrier '%s%.200s' (rank %d of %d)", c->prefix, key, rank, world);
    if (rank < 0 || rank >= world) return ds_err_set(err, "%s: rank outside the world", what);
    if (put_barrier(c, key, world, &rank, 1, timeout_ms, what, err) != 0) return -1;
    int rc = roundtrip(c, timeout_ms, what, err);
    return rc < 0 ? -1 : rc == DS_STORE_TIMEOUT ? 1 : 0;
}

int ds_store_barrier_status(ds_store_client *c, const char *key, int world, int *arrived, int *missing,
                            int *listed, int *nlisted, ds_err *err) {
    char what[512];
    snprintf(what, sizeof what, "barrier '%s%.200s': who arrived", c->prefix, key);
    if (put_barrier(c, key, world, NULL, 0, 0, what, err) != 0) return -1;
    if (roundtrip(c, IO_TIMEOUT_MS, what, err) != DS_STORE_OK) return -1;
    ds_reader r = {c->in.data, c->in.len};
    uint32_t a, m;
    if (ds_rd_u32(&r, &a) != 0 || ds_rd_u32(&r, &m) != 0 || r.n % 4 || r.n / 4 > DS_STORE_BARRIER_LISTED)
        return fail(c, err, "%s from %s: malformed answer", what, c->where);
    *arrived = (int)a;
    *missing = (int)m;
    *nlisted = (int)(r.n / 4);
    for (int i = 0; i < *nlisted; i++) listed[i] = (int)ds_load_u32(r.p + 4 * i);
    return 0;
}

int ds_store_heartbeat(ds_store_client *c, int node_rank, ds_err *err) {
    char what[64];
    snprintf(what, sizeof what, "heartbeat of node %d", node_rank);
    if (node_rank < 0) return ds_err_set(err, "%s: negative node rank", what);
    if (begin(c, DS_STORE_OP_HEARTBEAT) != 0 || ds_buf_put_u32(&c->out, (uint32_t)node_rank) != 0)
        return ds_err_set(err, "%s: out of memory", what);
    ds_frame_end(&c->out, 0);
    return roundtrip(c, IO_TIMEOUT_MS, what, err) == DS_STORE_OK ? 0 : -1;
}
