/* store_mux.h: the node's ranks on the agent's one connection to the store. One thread,
 * one poll loop over a handful of descriptors (the store, the listening socket, the
 * node's ranks, a wake-up eventfd). Tag 0 is the agent's own (heartbeats); each rank
 * connection gets the next tag. A rank's client sends one request at a time, and the
 * mux keeps it so: a connection is not read while its request is out. Barriers of the
 * whole world are joined on the node first (barrier_join.h): their requests to the store
 * carry tags of their own (DS_BJOIN_TAG_BIT); a GET or WAIT identical to one already at
 * the store waits for that one's answer (wait_join.h). */
#include "store_mux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "barrier_join.h"
#include "ds_buf.h"
#include "ds_clock.h"
#include "store_client.h"
#include "store_proto.h"
#include "store_token.h"
#include "wait_join.h"

#define READ_CHUNK (64 << 10)

typedef struct conn {
    int fd;
    uint32_t tag;
    int authed;
    int outstanding; /* its request is at the store */
    int closing;     /* close once out is sent (refused) */
    int dead;
    ds_buf in, out;
} conn;

struct ds_store_mux {
    int up_fd, listen_fd, wake_fd, lost_fd;
    char token[DS_STORE_TOKEN_LEN];
    pthread_t thread;
    atomic_int stop, hb_node, lost;
    char error[256];
    ds_buf up_in, up_out;
    conn **conns;
    int nconns, cap;
    uint32_t next_tag;
    ds_bjoin *join; /* NULL: barriers go to the store rank by rank */
    ds_wjoin *waits;
};

static void wake(int fd) {
    uint64_t one = 1;
    if (write(fd, &one, sizeof one) < 0) { /* saturated: already awake */ }
}

static void lose(ds_store_mux *m, const char *fmt, const char *detail) {
    if (atomic_load(&m->lost)) return;
    snprintf(m->error, sizeof m->error, fmt, detail);
    atomic_store(&m->lost, 1);
    wake(m->lost_fd);
    for (int i = 0; i < m->nconns; i++) m->conns[i]->dead = 1; /* their ranks see the store close */
}

/* Appends one frame: op-or-status, then a (and b) as its body. */
static int frame(ds_buf *b, uint8_t op, const void *a, size_t alen) {
    size_t start = ds_buf_unread(b);
    if (ds_frame_begin(b, op) != 0 || ds_buf_put(b, a, alen) != 0) return -1;
    ds_frame_end(b, start);
    return 0;
}

/* A TAGGED frame around op and body. */
static int tagged(ds_store_mux *m, uint32_t tag, uint8_t op, const uint8_t *body, size_t n) {
    size_t start = ds_buf_unread(&m->up_out);
    if (ds_frame_begin(&m->up_out, DS_STORE_OP_TAGGED) != 0 || ds_buf_put_u32(&m->up_out, tag) != 0 ||
        ds_buf_put_u8(&m->up_out, op) != 0 || (n && ds_buf_put(&m->up_out, body, n) != 0))
        return -1;
    ds_frame_end(&m->up_out, start);
    return 0;
}

/* ---- the ranks' side ---------------------------------------------------------------- */

static void conn_close(ds_store_mux *m, conn *c) {
    if (c->outstanding && m->join && ds_bjoin_gone(m->join, c->tag)) c->outstanding = 0; /* held here */
    if (c->outstanding && !ds_wjoin_gone(m->waits, c->tag)) c->outstanding = 0;         /* others wait for it */
    if (c->outstanding && !atomic_load(&m->lost)) {
        /* it was waiting for a key: the store forgets it */
        if (tagged(m, c->tag, DS_STORE_OP_CANCEL, NULL, 0) != 0) lose(m, "%s", "out of memory");
    }
    close(c->fd);
    ds_buf_free(&c->in);
    ds_buf_free(&c->out);
    free(c);
}

static void accept_ranks(ds_store_mux *m) {
    for (;;) {
        int fd = accept4(m->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (m->nconns == m->cap) {
            int cap = m->cap ? 2 * m->cap : 16;
            conn **cs = realloc(m->conns, (size_t)cap * sizeof *cs);
            if (!cs) {
                close(fd);
                continue;
            }
            m->conns = cs;
            m->cap = cap;
        }
        conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->tag = ++m->next_tag;
        m->conns[m->nconns++] = c;
    }
}

/* A rank's AUTH is checked here, against the token the agent was given. */
static void rank_auth(ds_store_mux *m, conn *c, const uint8_t *f, uint32_t len) {
    int ok = f[4] == DS_STORE_OP_AUTH && len == 1 + 4 + DS_STORE_TOKEN_LEN &&
             ds_load_u32(f + 5) == DS_STORE_VERSION && ds_store_token_equal(f + 9, m->token, DS_STORE_TOKEN_LEN);
    static const char no[] = "wrong token or protocol version (told by this node's agent)";
    if (ok ? frame(&c->out, DS_STORE_OK, NULL, 0) : frame(&c->out, DS_STORE_ERROR, no, sizeof no - 1)) c->dead = 1;
    c->authed = ok;
    c->closing = !ok;
}

/* Sends on the rank's next complete request (one at a time). */
static void serve_rank(ds_store_mux *m, conn *c) {
    while (!c->dead && !c->closing && !c->outstanding && ds_buf_unread(&c->in) >= 5) {
        const uint8_t *f = ds_buf_head(&c->in);
        uint32_t len = ds_load_u32(f);
        if (len == 0 || len > (c->authed ? DS_STORE_MAX_FRAME : DS_STORE_AUTH_FRAME)) {
            c->dead = 1; /* what the store would do to a malformed frame */
            return;
        }
        if (ds_buf_unread(&c->in) < 4 + (size_t)len) return;
        if (!c->authed) {
            rank_auth(m, c, f, len);
        } else if (f[4] == DS_STORE_OP_AUTH || f[4] == DS_STORE_OP_TAGGED || f[4] == DS_STORE_OP_CANCEL) {
            c->dead = 1;
        } else {
            int joined = atomic_load(&m->lost)                ? 0
                         : f[4] == DS_STORE_OP_BARRIER && m->join ? ds_bjoin_arrive(m->join, c->tag, f + 5, len - 1, ds_now_ms())
                                                                  : ds_wjoin_request(m->waits, c->tag, f[4], f + 5, len - 1, ds_now_ms());
            if (joined < 0 || (!joined && tagged(m, c->tag, f[4], f + 5, len - 1) != 0)) lose(m, "%s", "out of memory");
            else c->outstanding = 1;
        }
        ds_buf_consume(&c->in, 4 + (size_t)len);
    }
}

static void read_rank(ds_store_mux *m, conn *c) {
    if (ds_buf_reserve(&c->in, READ_CHUNK) != 0) {
        c->dead = 1;
        return;
    }
    ssize_t n = recv(c->fd, c->in.data + c->in.len, READ_CHUNK, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        c->dead = 1;
        return;
    }
    if (n > 0) c->in.len += (size_t)n;
    serve_rank(m, c);
}

static void flush(int fd, ds_buf *b, int *dead) {
    while (ds_buf_unread(b)) {
        ssize_t n = send(fd, ds_buf_head(b), ds_buf_unread(b), MSG_NOSIGNAL);
        if (n > 0) {
            ds_buf_consume(b, (size_t)n);
        } else if (!(n < 0 && errno == EINTR)) {
            if (!(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) *dead = 1;
            return;
        }
    }
}

/* ---- the store's side --------------------------------------------------------------- */

static conn *conn_of(ds_store_mux *m, uint32_t tag) {
    for (int i = 0; i < m->nconns; i++)
        if (m->conns[i]->tag == tag) return m->conns[i];
    return NULL; /* the rank went away meanwhile */
}

/* An answer for the rank connection of tag. Its next request is served by the caller
 * (serve_waiting): this may run inside barrier_join, which must not be entered again. */
static void answer_rank(ds_store_mux *m, uint32_t tag, uint8_t status, const uint8_t *body, size_t n) {
    conn *c = conn_of(m, tag);
    if (!c || c->dead) return;
    if (frame(&c->out, status, body, n) != 0) c->dead = 1;
    c->outstanding = 0;
}

static void serve_waiting(ds_store_mux *m) {
    for (int i = 0; i < m->nconns; i++)
        if (!m->conns[i]->outstanding) serve_rank(m, m->conns[i]);
}

/* barrier_join's ways out. */
static int join_resend(void *ctx, uint32_t tag, uint8_t op, const uint8_t *body, size_t n) {
    return tagged(ctx, tag, op, body, n);
}

static int join_send(void *ctx, uint32_t utag, const uint8_t *body, size_t n) {
    return join_resend(ctx, utag, DS_STORE_OP_BARRIER, body, n);
}

static void join_answer(void *ctx, uint32_t tag, uint8_t status, const uint8_t *body, size_t n) {
    answer_rank(ctx, tag, status, body, n);
}

static void join_cancel(void *ctx, uint32_t tag) {
    ds_store_mux *m = ctx;
    if (!atomic_load(&m->lost) && tagged(m, tag, DS_STORE_OP_CANCEL, NULL, 0) != 0) lose(m, "%s", "out of memory");
}

static void answers(ds_store_mux *m) {
    while (ds_buf_unread(&m->up_in) >= 5) {
        const uint8_t *f = ds_buf_head(&m->up_in);
        uint32_t len = ds_load_u32(f);
        if (len > DS_STORE_MAX_FRAME + 16 || (f[4] == DS_STORE_TAGGED && len < 6)) {
            lose(m, "%s", "malformed answer from the store");
            return;
        }
        if (ds_buf_unread(&m->up_in) < 4 + (size_t)len) return;
        if (f[4] != DS_STORE_TAGGED) {
            char why[200];
            snprintf(why, sizeof why, "%.*s", (int)(len - 1 < 150 ? len - 1 : 150), (const char *)f + 5);
            lose(m, "the store dropped this node: %s", why);
            return;
        }
        uint32_t tag = ds_load_u32(f + 5);
        const uint8_t *inner = f + 9; /* status | body */
        size_t ilen = len - 5;
        if (tag == 0) {
            if (inner[0] != DS_STORE_OK) {
                char why[200];
                snprintf(why, sizeof why, "%.*s", (int)(ilen - 1 < 150 ? ilen - 1 : 150), (const char *)inner + 1);
                lose(m, "heartbeat refused: %s", why);
                return;
            }
        } else if (tag & DS_BJOIN_TAG_BIT) {
            if (m->join) ds_bjoin_answer(m->join, tag, inner[0], inner + 1, ilen - 1);
        } else {
            answer_rank(m, tag, inner[0], inner + 1, ilen - 1);
            ds_wjoin_answer(m->waits, tag, inner[0], inner + 1, ilen - 1, ds_now_ms()); /* ranks that joined it */
        }
        ds_buf_consume(&m->up_in, 4 + (size_t)len);
    }
    serve_waiting(m);
}

static void read_store(ds_store_mux *m) {
    for (int rounds = 0; rounds < 16; rounds++) {
        if (ds_buf_reserve(&m->up_in, READ_CHUNK) != 0) {
            lose(m, "%s", "out of memory");
            return;
        }
        ssize_t n = recv(m->up_fd, m->up_in.data + m->up_in.len, READ_CHUNK, 0);
        if (n > 0) {
            m->up_in.len += (size_t)n;
            answers(m);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        lose(m, "connection to the store lost: %s", n == 0 ? "closed by the controller" : strerror(errno));
        return;
    }
}

/* ---- the loop ----------------------------------------------------------------------- */

static void reap_conns(ds_store_mux *m) {
    int j = 0;
    for (int i = 0; i < m->nconns; i++) {
        conn *c = m->conns[i];
        if (c->closing && !ds_buf_unread(&c->out)) c->dead = 1;
        if (c->dead) conn_close(m, c);
        else m->conns[j++] = c;
    }
    m->nconns = j;
}

static void *mux_main(void *arg) {
    ds_store_mux *m = arg;
    struct pollfd *pf = NULL;
    int pcap = 0;
    while (!atomic_load(&m->stop)) {
        int64_t due = -1;
        if (!atomic_load(&m->lost)) {
            int64_t now = ds_now_ms(), waits = ds_wjoin_expire(m->waits, now);
            due = m->join ? ds_bjoin_expire(m->join, now) : -1;
            if (waits >= 0 && (due < 0 || waits < due)) due = waits;
            serve_waiting(m);
        }
        int hb = atomic_exchange(&m->hb_node, -1);
        if (hb >= 0 && !atomic_load(&m->lost)) {
            uint8_t node[4];
            ds_store_u32(node, (uint32_t)hb);
            if (tagged(m, 0, DS_STORE_OP_HEARTBEAT, node, sizeof node) != 0) lose(m, "%s", "out of memory");
        }
        int dead = 0;
        if (!atomic_load(&m->lost)) flush(m->up_fd, &m->up_out, &dead);
        if (dead) lose(m, "connection to the store lost: %s", "sending failed");
        for (int i = 0; i < m->nconns; i++) flush(m->conns[i]->fd, &m->conns[i]->out, &m->conns[i]->dead);
        reap_conns(m);
        if (3 + m->nconns > pcap) {
            int cap = 2 * (3 + m->nconns);
            struct pollfd *p = realloc(pf, (size_t)cap * sizeof *p);
            if (!p) {
                lose(m, "%s", "out of memory");
                poll(NULL, 0, 100);
                continue;
            }
            pf = p;
            pcap = cap;
        }
        int lost = atomic_load(&m->lost);
        pf[0] = (struct pollfd){.fd = m->wake_fd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = lost ? -1 : m->up_fd,
                                .events = POLLIN | (ds_buf_unread(&m->up_out) ? POLLOUT : 0)};
        pf[2] = (struct pollfd){.fd = m->listen_fd, .events = POLLIN};
        for (int i = 0; i < m->nconns; i++) {
            conn *c = m->conns[i];
            short ev = (short)((c->outstanding || c->closing ? 0 : POLLIN) | (ds_buf_unread(&c->out) ? POLLOUT : 0));
            pf[3 + i] = (struct pollfd){.fd = c->fd, .events = ev};
        }
        int nconns = m->nconns;
        int timeout = -1; /* until a rank's barrier timeout is due */
        if (due >= 0) {
            int64_t left = due - ds_now_ms();
            timeout = left <= 0 ? 0 : left > INT32_MAX ? INT32_MAX : (int)left;
        }
        if (poll(pf, (nfds_t)(3 + nconns), timeout) < 0) continue; /* EINTR */
        if (pf[0].revents) {
            uint64_t v;
            if (read(m->wake_fd, &v, sizeof v) < 0) { /* drained elsewhere */ }
        }
        if (pf[1].revents & (POLLIN | POLLHUP | POLLERR)) read_store(m);
        for (int i = 0; i < nconns; i++) {
            conn *c = m->conns[i];
            if (pf[3 + i].revents & (POLLIN | POLLHUP | POLLERR)) {
                if (c->outstanding || c->closing) c->dead = 1; /* hung up while waiting */
                else read_rank(m, c);
            }
        }
        if (pf[2].revents & POLLIN) accept_ranks(m);
    }
    free(pf);
    return NULL;
}

/* ---- API ---------------------------------------------------------------------------- */

static int listen_abstract(char *name, size_t cap, ds_err *err) {
    snprintf(name, cap, "@dsrun-agent-%d-store", (int)getpid());
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(sa.sun_path, name, n);
    sa.sun_path[0] = 0;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)) != 0 ||
        listen(fd, 4096) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ds_err_errno(err, e, "listening on %s for this node's ranks", name);
    }
    return fd;
}

ds_store_mux *ds_store_mux_start(ds_store_client *c, const char *token, int world, const int *ranks, int nranks,
                                 ds_err *err) {
    if (!ds_store_token_valid(token)) {
        ds_err_set(err, "store mux: the token must be 64 hex chars");
        return NULL;
    }
    ds_store_mux *m = calloc(1, sizeof *m);
    if (!m) {
        ds_err_set(err, "store mux: out of memory");
        return NULL;
    }
    memcpy(m->token, token, DS_STORE_TOKEN_LEN);
    atomic_store(&m->hb_node, -1);
    if ((world > 0 && nranks > 0 &&
         !(m->join = ds_bjoin_new(world, ranks, nranks, (ds_bjoin_ops){m, join_send, join_answer}))) ||
        !(m->waits = ds_wjoin_new((ds_wjoin_ops){m, join_resend, join_answer, join_cancel}))) {
        ds_bjoin_free(m->join);
        ds_err_set(err, "store mux: out of memory");
        free(m);
        return NULL;
    }
    m->up_fd = ds_store_fd(c);
    fcntl(m->up_fd, F_SETFL, fcntl(m->up_fd, F_GETFL) | O_NONBLOCK);
    m->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    m->lost_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    char name[64];
    m->listen_fd = m->wake_fd < 0 || m->lost_fd < 0 ? ds_err_errno(err, errno, "eventfd")
                                                     : listen_abstract(name, sizeof name, err);
    /* The workers the agent starts inherit its environment. */
    int rc = m->listen_fd < 0 ? -1 : setenv("DS_STORE_SOCKET", name, 1) != 0 ? ds_err_errno(err, errno, "setenv") : 0;
    if (rc == 0 && (rc = pthread_create(&m->thread, NULL, mux_main, m)) != 0)
        ds_err_errno(err, rc, "starting the store mux's thread");
    if (rc != 0) {
        ds_bjoin_free(m->join);
        ds_wjoin_free(m->waits);
        if (m->listen_fd >= 0) close(m->listen_fd);
        if (m->wake_fd >= 0) close(m->wake_fd);
        if (m->lost_fd >= 0) close(m->lost_fd);
        free(m);
        return NULL;
    }
    return m;
}

int ds_store_mux_fd(const ds_store_mux *m) { return m->lost_fd; }

int ds_store_mux_heartbeat(ds_store_mux *m, int node_rank) {
    if (atomic_load(&m->lost)) return -1;
    atomic_store(&m->hb_node, node_rank);
    wake(m->wake_fd);
    return 0;
}

const char *ds_store_mux_error(const ds_store_mux *m) { return atomic_load(&m->lost) ? m->error : ""; }

void ds_store_mux_stop(ds_store_mux *m) {
    if (!m) return;
    atomic_store(&m->stop, 1);
    wake(m->wake_fd);
    pthread_join(m->thread, NULL);
    atomic_store(&m->lost, 1); /* no CANCEL now: the connection is closing */
    for (int i = 0; i < m->nconns; i++) conn_close(m, m->conns[i]);
    free(m->conns);
    close(m->listen_fd);
    close(m->wake_fd);
    close(m->lost_fd);
    ds_buf_free(&m->up_in);
    ds_buf_free(&m->up_out);
    ds_bjoin_free(m->join);
    ds_wjoin_free(m->waits);
    unsetenv("DS_STORE_SOCKET");
    free(m);
}
