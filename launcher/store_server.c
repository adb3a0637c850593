/* The rendezvous store server: one thread, one epoll loop, non-blocking sockets.
 *
 * A request that must wait (GET of a missing key, WAIT) becomes a waiter on the key it
 * misses (store_waiters.c) and is answered when that key is set or its deadline passes,
 * so a blocked client costs nothing, never blocks another, and a change wakes only the
 * requests it concerns. The loop hears only from connections with something to do
 * (epoll): an idle connection costs nothing per pass. One mutex guards what other
 * threads read or write (the map, heartbeats, events); the thread takes it per request.
 * Files: store_server_impl.h. */
#include "store_server.h"
#include "store_server_impl.h"
#include "ds_clock.h"
#include "ds_tcp.h"

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define AUTH_TIMEOUT_MS 10000      /* default; DS_STORE_AUTH_TIMEOUT_MS overrides */
#define MAX_CLIENTS 16384          /* default; DS_STORE_MAX_CLIENTS overrides */
#define REFUSED_MAX 256            /* over the limit, this many more are told why; the rest are closed */
#define READ_CHUNK (64 << 10)
#define READS_PER_TURN 16          /* fairness: at most 1 MiB from one client per turn */
#define OUT_HIGH_WATER (1 << 20)   /* stop taking requests from a client that is not reading */
#define EVENTS_PER_WAIT 256

/* epoll's data for the two descriptors that are not clients */
static char listen_mark, wake_mark;

/* ---- events and heartbeats (callers hold s->lock) ---------------------------------- */

void ds_store_event_push(ds_store_server *s, ds_store_event_kind kind, int node_rank, const char *peer,
                         const char *reason) {
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

int ds_store_heartbeat_fit(ds_store_server *s, int node) {
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
void ds_store_client_drop(ds_store_server *s, client *c, const char *reason) {
    if (c->dead) return;
    c->dead = 1;
    s->ndead++;
    ds_store_drop_waiters(s, c);
    pthread_mutex_lock(&s->lock);
    if (reason) ds_store_event_push(s, DS_STORE_EV_CLIENT_REJECTED, c->node_rank, c->peer, reason);
    if (c->node_rank >= 0 && c->node_rank < s->nhb && s->hb_owner[c->node_rank] == c->id) {
        s->hb_owner[c->node_rank] = 0;
        ds_store_event_push(s, DS_STORE_EV_NODE_LOST, c->node_rank, c->peer,
                            reason ? reason : "connection closed");
    }
    if (c->authed) s->nauthed--;
    pthread_mutex_unlock(&s->lock);
}

static void client_free(ds_store_server *s, client *c) {
    /* Out of the epoll set first: a forked child (the controller starts local agents)
     * may still hold the socket, and then close alone would leave it registered. */
    if (c->fd >= 0) epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->fd >= 0) close(c->fd);
    ds_buf_free(&c->in);
    ds_buf_free(&c->out);
    free(c);
}

static int wants_input(const client *c) {
    return !c->blocked && !c->closing && ds_buf_unread(&c->out) < OUT_HIGH_WATER;
}

/* Tells epoll what c waits for now (input, room to send, or only a hang-up). */
static void watch(ds_store_server *s, client *c) {
    if (c->dead) return;
    uint32_t want = EPOLLRDHUP | (wants_input(c) ? EPOLLIN : 0) | (ds_buf_unread(&c->out) ? EPOLLOUT : 0);
    if (want == c->ev_mask) return;
    struct epoll_event ev = {.events = want, .data.ptr = c};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->ev_mask = want;
    else ds_store_client_drop(s, c, "epoll_ctl failed");
}

static void pause_listening(ds_store_server *s, int pause) {
    struct epoll_event ev = {.events = pause ? 0 : EPOLLIN, .data.ptr = &listen_mark};
    epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, s->listen_fd, &ev);
    s->listen_pause_until = pause ? ds_now_ms() + 100 : 0;
}

static void accept_clients(ds_store_server *s) {
    for (;;) {
        struct sockaddr_storage sa = {0};
        socklen_t salen = sizeof sa;
        int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* Out of fds: stop listening a moment instead of spinning on it. */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) pause_listening(s, 1);
            return;
        }
        char peer[64];
        peer_name(&sa, salen, peer, sizeof peer);
        client *c = NULL;
        if (s->nclients < s->max_clients + REFUSED_MAX) {
            if (s->nclients == s->cap_clients) {
                int cap = s->cap_clients ? 2 * s->cap_clients : 64;
                client **cs = realloc(s->clients, (size_t)cap * sizeof *cs);
                if (cs) s->clients = cs, s->cap_clients = cap;
            }
            if (s->nclients < s->cap_clients) c = calloc(1, sizeof *c);
        }
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (!c || epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            pthread_mutex_lock(&s->lock);
            ds_store_event_push(s, DS_STORE_EV_CLIENT_REJECTED, -1, peer,
                                s->nclients >= s->max_clients ? "too many connections" : "out of memory");
            pthread_mutex_unlock(&s->lock);
            free(c);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        c->fd = fd;
        c->ev_mask = ev.events;
        c->id = ++s->next_id;
        c->node_rank = -1;
        c->connected_ms = ds_now_ms();
        /* Over the limit it is still heard, to be told why it is not served. */
        c->refused = s->nclients >= s->max_clients;
        snprintf(c->peer, sizeof c->peer, "%s", peer);
        s->clients[s->nclients++] = c;
        int64_t due = c->connected_ms + s->auth_timeout_ms;
        if (s->next_due_ms < 0 || due < s->next_due_ms) s->next_due_ms = due;
    }
}

/* ---- requests ---------------------------------------------------------------------- */

/* A connection that is not to be served hears why (an ERROR answer to its AUTH, which
 * the client prints), then is closed once that is sent. */
static void refuse(ds_store_server *s, client *c, const char *why) {
    request q = {.s = s, .c = c};
    if (ds_store_reply(&q, DS_STORE_ERROR, why, strlen(why), NULL, 0) != DONE) {
        ds_store_client_drop(s, c, why);
        return;
    }
    c->closing = 1;
    snprintf(c->closing_why, sizeof c->closing_why, "%s", why);
}

/* Serves the complete frames at the front of c->in, stopping at one that blocks. */
static void serve_frames(ds_store_server *s, client *c) {
    while (!c->dead && !c->blocked && !c->closing && ds_buf_unread(&c->out) < OUT_HIGH_WATER) {
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
            ds_store_client_drop(s, c, why);
            return;
        }
        if (avail < 4 + (size_t)len) return;
        request q = {.s = s, .c = c, .body = {f + 5, len - 1}, .whole = {f + 5, len - 1}, .op = f[4]};
        int rc;
        if (c->refused && !c->authed && q.op == DS_STORE_OP_AUTH) {
            char why[200];
            snprintf(why, sizeof why, "too many connections: this store serves at most %d at once",
                     s->max_clients);
            refuse(s, c, why);
            rc = DONE;
        } else {
            if (q.op != DS_STORE_OP_TAGGED) ds_store_count(s, q.op);
            rc = ds_store_dispatch(&q);
        }
        if (rc == REJECT && !c->authed && q.op == DS_STORE_OP_AUTH) {
            refuse(s, c, q.why); /* wrong token, version: the client can say so */
            rc = DONE;
        }
        if (rc == REJECT) {
            if (q.w) ds_store_waiter_free(s, q.w);
            ds_store_client_drop(s, c, q.why);
            return;
        }
        if (rc == DONE && q.w) ds_store_waiter_free(s, q.w); /* timed out at once */
        ds_buf_consume(&c->in, 4 + (size_t)len); /* a waiter keeps its own copy */
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
            ds_store_client_drop(s, c, c->closing ? c->closing_why : NULL);
        }
    }
    if (c->closing && !c->dead) ds_store_client_drop(s, c, c->closing_why); /* told why: now closed */
}

static void read_in(ds_store_server *s, client *c) {
    for (int i = 0; i < READS_PER_TURN && !c->dead && wants_input(c); i++) {
        /* Before AUTH read no more than an AUTH frame: unknown peers cost ~nothing. */
        size_t chunk = c->authed ? READ_CHUNK : 4 + DS_STORE_AUTH_FRAME;
        if (ds_buf_reserve(&c->in, chunk) != 0) {
            ds_store_client_drop(s, c, "out of memory reading");
            return;
        }
        ssize_t n = recv(c->fd, c->in.data + c->in.len, chunk, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            serve_frames(s, c);
        } else if (n == 0) {
            ds_store_client_drop(s, c, NULL);
        } else if (errno != EINTR) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) ds_store_client_drop(s, c, NULL);
            return;
        }
    }
}

void ds_store_pump(ds_store_server *s, client *c) {
    for (;;) {
        flush_out(s, c);
        size_t before = ds_buf_unread(&c->in);
        serve_frames(s, c);
        if (c->dead || ds_buf_unread(&c->in) == before) break;
    }
    flush_out(s, c);
    watch(s, c);
}

/* Deadlines that came due: connections that never authenticated are dropped, waiters
 * whose time is up are answered TIMEOUT (via the ready list). Sets the next one. */
static void check_deadlines(ds_store_server *s, int64_t now) {
    int64_t next = -1;
    for (int i = 0; i < s->nclients; i++) {
        client *c = s->clients[i];
        if (c->dead) continue;
        if (!c->authed) {
            int64_t due = c->connected_ms + s->auth_timeout_ms;
            if (now >= due) {
                char why[64];
                snprintf(why, sizeof why, "no AUTH within %g s", s->auth_timeout_ms / 1000.0);
                ds_store_client_drop(s, c, why);
                continue;
            }
            if (next < 0 || due < next) next = due;
        }
        ds_store_expire(s, c, now, &next);
    }
    s->next_due_ms = next;
}

static void reap(ds_store_server *s) {
    int j = 0;
    for (int i = 0; i < s->nclients; i++) {
        if (s->clients[i]->dead) client_free(s, s->clients[i]);
        else s->clients[j++] = s->clients[i];
    }
    s->nclients = j;
    s->ndead = 0;
}

static int wait_timeout(ds_store_server *s) {
    if (atomic_load(&s->changed)) return 0;
    int64_t now = ds_now_ms(), next = s->next_due_ms;
    if (s->listen_pause_until && (next < 0 || s->listen_pause_until < next)) next = s->listen_pause_until;
    if (next < 0) return -1;
    return next > now ? (int)(next - now) : 0;
}

static void handle(ds_store_server *s, client *c, uint32_t re) {
    if (c->dead) return;
    if (re & EPOLLOUT) ds_store_pump(s, c);
    if (re & (EPOLLIN | EPOLLHUP | EPOLLERR)) read_in(s, c);
    /* A blocked client that hangs up will never read its answer. */
    if ((re & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) && !c->dead && !wants_input(c)) ds_store_client_drop(s, c, NULL);
    ds_store_pump(s, c);
}

static void *server_main(void *arg) {
    ds_store_server *s = arg;
    pthread_setname_np(pthread_self(), "ds-store"); /* its CPU time apart in /proc (bench/scale) */
    struct epoll_event evs[EVENTS_PER_WAIT];
    while (!atomic_load(&s->stop)) {
        int64_t now = ds_now_ms();
        if (s->next_due_ms >= 0 && now >= s->next_due_ms) check_deadlines(s, now);
        if (s->listen_pause_until && now >= s->listen_pause_until) pause_listening(s, 0);
        ds_store_run_ready(s);
        if (s->ndead) reap(s);
        int n = epoll_wait(s->epoll_fd, evs, EVENTS_PER_WAIT, wait_timeout(s));
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &listen_mark) {
                accept_clients(s);
            } else if (p == &wake_mark) {
                uint64_t v;
                if (read(s->wake_fd, &v, sizeof v) < 0) { /* EAGAIN: someone else drained it */ }
            } else {
                handle(s, p, evs[i].events);
            }
        }
    }
    return NULL;
}

/* ---- public API -------------------------------------------------------------------- */

/* name=V from the environment into *out when set: 1..max, else an error naming it. */
static int env_int(const char *name, const char *what, long max, int *out, ds_err *err) {
    const char *env = getenv(name);
    if (!env) return 0;
    char *end;
    long v = strtol(env, &end, 10);
    if (*env == '\0' || *end || v < 1 || v > max)
        return ds_err_set(err, "store: %s=%.40s: expected %s 1..%ld", name, env, what, max);
    *out = (int)v;
    return 0;
}

int ds_store_server_start(const char *addr, int port, const char *token,
                          ds_store_server **out, ds_err *err) {
    *out = NULL;
    if (!ds_store_token_valid(token)) return ds_err_set(err, "store: the token must be 64 hex chars");
    if (port < 0 || port > 65535) return ds_err_set(err, "store: port %d out of range 0..65535", port);
    int auth_ms = AUTH_TIMEOUT_MS, max_clients = MAX_CLIENTS;
    if (env_int("DS_STORE_AUTH_TIMEOUT_MS", "milliseconds", 3600000, &auth_ms, err) != 0 ||
        env_int("DS_STORE_MAX_CLIENTS", "a count of connections", 1 << 20, &max_clients, err) != 0)
        return -1;
    ds_store_server *s = calloc(1, sizeof *s);
    if (!s) return ds_err_set(err, "store: out of memory");
    s->auth_timeout_ms = auth_ms;
    s->max_clients = max_clients;
    s->next_due_ms = -1;
    s->listen_fd = s->wake_fd = s->event_fd = s->epoll_fd = -1;
    memcpy(s->token, token, DS_STORE_TOKEN_LEN);
    pthread_mutex_init(&s->lock, NULL);
    int map_rc = ds_store_map_init(&s->map) | ds_store_map_init(&s->waiting) | ds_store_map_init(&s->barriers);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (map_rc != 0 || s->wake_fd < 0 || s->event_fd < 0 || s->epoll_fd < 0) {
        ds_err_errno(err, errno, "store: setting up");
        goto fail;
    }
    s->listen_fd = ds_tcp_listen("store", addr, port, &s->port, err);
    if (s->listen_fd < 0) goto fail;
    struct epoll_event lev = {.events = EPOLLIN, .data.ptr = &listen_mark};
    struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &wake_mark};
    if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &lev) != 0 ||
        epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->wake_fd, &wev) != 0) {
        ds_err_errno(err, errno, "store: epoll");
        goto fail;
    }
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
    if (s->epoll_fd >= 0) close(s->epoll_fd);
    ds_store_map_free(&s->map);
    ds_store_map_free(&s->waiting);
    ds_store_map_free(&s->barriers);
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
    for (int i = 0; i < s->nclients; i++) {
        ds_store_drop_waiters(s, s->clients[i]);
        client_free(s, s->clients[i]);
    }
    free(s->clients);
    close(s->listen_fd);
    close(s->wake_fd);
    close(s->event_fd);
    close(s->epoll_fd);
    ds_store_map_free(&s->map);
    ds_store_map_free(&s->waiting);
    ds_store_map_free(&s->barriers);
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

int ds_store_server_get(ds_store_server *s, const char *key, char **val, size_t *len) {
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    ds_store_entry *e = ds_store_map_get(&s->map, key, strlen(key));
    if (e) {
        rc = 1;
        if (val) {
            *val = malloc(e->vlen + 1);
            if (*val) {
                memcpy(*val, e->val, e->vlen);
                (*val)[e->vlen] = 0;
                if (len) *len = e->vlen;
            } else {
                rc = -1;
            }
        }
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int ds_store_server_nclients(ds_store_server *s) {
    pthread_mutex_lock(&s->lock);
    int n = s->nauthed;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int ds_store_server_nwaiting(ds_store_server *s) { return atomic_load(&s->nwaiting); }

uint64_t ds_store_server_requests(ds_store_server *s, int op) {
    return op >= 0 && op < DS_STORE_NOPS ? atomic_load_explicit(&s->nops[op], memory_order_relaxed) : 0;
}

void ds_store_server_describe_requests(ds_store_server *s, char *buf, size_t cap) {
    static const struct {
        int op;
        const char *name;
    } ops[] = {{DS_STORE_OP_AUTH, "auth"},     {DS_STORE_OP_SET, "set"},       {DS_STORE_OP_GET, "get"},
               {DS_STORE_OP_ADD, "add"},       {DS_STORE_OP_WAIT, "wait"},     {DS_STORE_OP_CHECK, "check"},
               {DS_STORE_OP_DELETE, "delete"}, {DS_STORE_OP_CANCEL, "cancel"}, {DS_STORE_OP_BARRIER, "barrier"},
               {DS_STORE_OP_HEARTBEAT, "heartbeat"},
               {0, "unknown"}};
    uint64_t total = 0;
    for (int op = 0; op < DS_STORE_NOPS; op++) total += ds_store_server_requests(s, op);
    size_t n = (size_t)snprintf(buf, cap, "%llu requests", (unsigned long long)total);
    for (size_t i = 0; i < sizeof ops / sizeof ops[0] && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s %s %llu", i ? "," : ":", ops[i].name,
                              (unsigned long long)ds_store_server_requests(s, ops[i].op));
}
