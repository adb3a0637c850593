#include "ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <libssh2.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "knownhosts.h"
#include "ds_clock.h"

#define MAX_HOPS 9 /* ProxyJump's hops and the node */

typedef enum {
    S_CONNECT,
    S_HANDSHAKE,
    S_AUTH_AGENT,
    S_AUTH_FILE,
    S_TUNNEL,  /* a direct-tcpip channel to the next hop */
    S_CHANNEL,
    S_EXEC,
    S_OPEN,
} ssh_state;

/* One SSH session of the chain: to a ProxyJump host, or the node itself (the last). */
typedef struct hop {
    const ds_ssh_opts *o;
    LIBSSH2_SESSION *session;
    LIBSSH2_CHANNEL *via;    /* the previous hop's tunnel this session's bytes go through */
    LIBSSH2_CHANNEL *tunnel; /* this session's channel to the next hop */
    LIBSSH2_AGENT *agent;
    struct libssh2_agent_publickey *agent_key;
    int agent_keys_tried;
    int identity;            /* the next identity file to try */
    char auth_tried[512];    /* what was tried, for the error message */
    char label[600];         /* how messages name it */
} hop;

struct ds_ssh {
    ds_ssh_opts o;           /* the node; o.jumps the hops before it */
    char *command;
    int sock;                /* to the first hop */
    ssh_state state;
    hop hops[MAX_HOPS];
    int nhops, cur;          /* the hop being opened */
    long long deadline_ms;
    LIBSSH2_CHANNEL *channel;
    LIBSSH2_CHANNEL *aux;    /* ds_ssh_exec_aux's channel */
};

char *ds_shell_quote(const char *s) {
    size_t n = 3;
    for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = malloc(n), *o = q;
    if (!q) return NULL;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = 0;
    return q;
}

int ds_ssh_global_init(ds_err *err) {
    if (libssh2_init(0) != 0) return ds_err_set(err, "libssh2 initialisation failed");
    return 0;
}

static void tune_socket(int fd) {
    int one = 1, idle = 10, intvl = 5, cnt = 3;
    unsigned user_timeout = 20000; /* a link that swallows data for 20 s is dead */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

static hop *cur(ds_ssh *s) { return &s->hops[s->cur]; }

static int start_connect(ds_ssh *s, ds_err *err) {
    const ds_ssh_opts *o = s->hops[0].o;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &ai);
    if (rc != 0) return ds_err_set(err, "%s: cannot resolve host: %s", s->hops[0].label, gai_strerror(rc));
    s->sock = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->sock < 0) {
        freeaddrinfo(ai);
        return ds_err_errno(err, errno, "socket");
    }
    tune_socket(s->sock);
    rc = connect(s->sock, ai->ai_addr, ai->ai_addrlen);
    int e = errno;
    freeaddrinfo(ai);
    if (rc != 0 && e != EINPROGRESS) return ds_err_errno(err, e, "%s: connect", s->hops[0].label);
    return 0;
}

/* "host:port", or for a ProxyJump host "host:port (ProxyJump host of NAME)"; an IPv6
 * address in brackets. */
static void make_label(hop *h, const ds_ssh_opts *node) {
    const char *fmt = strchr(h->o->host, ':') ? "[%s]:%d" : "%s:%d";
    int n = snprintf(h->label, sizeof h->label, fmt, h->o->host, h->o->port);
    if (h->o != node && n > 0 && (size_t)n < sizeof h->label)
        snprintf(h->label + n, sizeof h->label - (size_t)n, " (ProxyJump host of %s)", node->name);
}

ds_ssh *ds_ssh_start(ds_ssh_opts *o, const char *command, ds_err *err) {
    ds_ssh *s = calloc(1, sizeof *s);
    if (!s) {
        ds_ssh_opts_free(o);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    s->o = *o;
    memset(o, 0, sizeof *o);
    s->sock = -1;
    s->command = strdup(command);
    s->deadline_ms = ds_now_ms() + (s->o.timeout_ms > 0 ? s->o.timeout_ms : 10000);
    if (s->o.njumps + 1 > MAX_HOPS) {
        ds_err_set(err, "%s: more than %d ProxyJump hosts", s->o.name, MAX_HOPS - 1);
        ds_ssh_free(s);
        return NULL;
    }
    for (int i = 0; i < s->o.njumps; i++) s->hops[i].o = &s->o.jumps[i];
    s->hops[s->o.njumps].o = &s->o;
    s->nhops = s->o.njumps + 1;
    for (int i = 0; i < s->nhops; i++) make_label(&s->hops[i], &s->o);
    if (!s->command) {
        ds_err_set(err, "out of memory");
        ds_ssh_free(s);
        return NULL;
    }
    if (start_connect(s, err) != 0) {
        ds_ssh_free(s);
        return NULL;
    }
    return s;
}

static const char *last_error(LIBSSH2_SESSION *session) {
    char *msg = NULL;
    if (!session) return "no session";
    libssh2_session_last_error(session, &msg, NULL, 0);
    return msg && msg[0] ? msg : "unknown error";
}

const char *ds_ssh_last_error(ds_ssh *s) { return last_error(cur(s)->session); }

/* ---- the transport of a hop behind a ProxyJump host: the previous hop's tunnel ---- */

static LIBSSH2_SEND_FUNC(tunnel_send) {
    (void)socket, (void)flags;
    hop *h = *abstract;
    ssize_t n = libssh2_channel_write(h->via, buffer, length);
    if (n == LIBSSH2_ERROR_EAGAIN) return -EAGAIN;
    return n < 0 ? -ECONNRESET : n;
}

static LIBSSH2_RECV_FUNC(tunnel_recv) {
    (void)socket, (void)flags;
    hop *h = *abstract;
    ssize_t n = libssh2_channel_read(h->via, buffer, length);
    if (n == LIBSSH2_ERROR_EAGAIN || (n == 0 && !libssh2_channel_eof(h->via))) return -EAGAIN;
    return n < 0 ? -ECONNRESET : n; /* 0: the tunnel closed, which libssh2 takes as a disconnect */
}

/* A new session for the current hop: on the socket (the first), or on the tunnel the
 * previous hop opened, through the transport callbacks. */
static int new_session(ds_ssh *s, ds_err *err) {
    hop *h = cur(s);
    h->session = libssh2_session_init_ex(NULL, NULL, NULL, h);
    if (!h->session) return ds_err_set(err, "out of memory");
    if (s->cur > 0) {
        h->via = s->hops[s->cur - 1].tunnel;
        libssh2_session_callback_set(h->session, LIBSSH2_CALLBACK_SEND, (void *)tunnel_send);
        libssh2_session_callback_set(h->session, LIBSSH2_CALLBACK_RECV, (void *)tunnel_recv);
    }
    libssh2_session_set_blocking(h->session, 0);
    if (h->o->alive_interval_s > 0) libssh2_keepalive_config(h->session, 1, (unsigned)h->o->alive_interval_s);
    s->state = S_HANDSHAKE;
    return 1;
}

static int step_connect(ds_ssh *s, ds_err *err) {
    struct pollfd p = {.fd = s->sock, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0) return 0;
    int e = 0;
    socklen_t len = sizeof e;
    getsockopt(s->sock, SOL_SOCKET, SO_ERROR, &e, &len);
    if (e == EINPROGRESS) return 0;
    if (e) return ds_err_errno(err, e, "%s: cannot connect (is sshd running there, is the port right?)", cur(s)->label);
    return new_session(s, err);
}

static int step_handshake(ds_ssh *s, ds_err *err) {
    hop *h = cur(s);
    /* a hop behind a tunnel reads and writes through the callbacks; the socket given is
     * only looked at, never used */
    int rc = libssh2_session_handshake(h->session, s->sock);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    if (rc) return ds_err_set(err, "%s: SSH handshake failed: %s", h->label, last_error(h->session));
    if (ds_knownhosts_verify(h->session, h->o->host, h->o->port, (const char *const *)h->o->known_hosts,
                             h->o->nknown, h->o->check, err) != 0)
        return h->o == &s->o ? -1 : ds_err_prefix(err, "%s", h->label);
    const char *sock = getenv("SSH_AUTH_SOCK");
    s->state = h->o->use_agent && sock && sock[0] ? S_AUTH_AGENT : S_AUTH_FILE;
    return 1;
}

static void note_tried(hop *h, const char *what) {
    size_t n = strlen(h->auth_tried);
    snprintf(h->auth_tried + n, sizeof h->auth_tried - n, "%s%s", n ? ", " : "", what);
}

/* Authenticated: on to the next hop's tunnel, or the node's channel. */
static int authenticated(ds_ssh *s) {
    s->state = s->cur + 1 < s->nhops ? S_TUNNEL : S_CHANNEL;
    return 1;
}

static int auth_failed(ds_ssh *s, ds_err *err) {
    hop *h = cur(s);
    return ds_err_set(err,
                      "%s@%s: public-key authentication failed (tried %s; last error: %s). "
                      "Check that the public key is in ~/.ssh/authorized_keys of %s on the node, "
                      "that the user and identity ([ssh] or ~/.ssh/config) are right, and that the "
                      "key has no passphrase (use ssh-agent for those)",
                      h->o->user, h->label, h->auth_tried[0] ? h->auth_tried : "nothing",
                      last_error(h->session), h->o->user);
}

/* The identity files, in turn; a missing one is noted and skipped. */
static int step_auth_file(ds_ssh *s, ds_err *err) {
    hop *h = cur(s);
    for (; h->identity < h->o->nidentities; h->identity++) {
        const char *key = h->o->identities[h->identity];
        char what[600];
        if (access(key, R_OK) != 0) {
            snprintf(what, sizeof what, "identity %s (%s)", key, strerror(errno));
            note_tried(h, what);
            continue;
        }
        char pub[4200];
        snprintf(pub, sizeof pub, "%s.pub", key);
        int rc = libssh2_userauth_publickey_fromfile_ex(h->session, h->o->user, (unsigned)strlen(h->o->user),
                                                        access(pub, R_OK) == 0 ? pub : NULL, key, NULL);
        if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
        if (rc == 0) return authenticated(s);
        snprintf(what, sizeof what, "identity %s", key);
        note_tried(h, what);
    }
    return auth_failed(s, err);
}

static void agent_done(hop *h) {
    if (!h->agent) return;
    libssh2_agent_disconnect(h->agent);
    libssh2_agent_free(h->agent);
    h->agent = NULL;
}

/* ssh-agent: each key in turn; when none works, the identity files. */
static int step_auth_agent(ds_ssh *s, ds_err *err) {
    (void)err;
    hop *h = cur(s);
    if (!h->agent) {
        h->agent = libssh2_agent_init(h->session);
        if (!h->agent || libssh2_agent_connect(h->agent) != 0 || libssh2_agent_list_identities(h->agent) != 0) {
            note_tried(h, "ssh-agent (unreachable)");
            goto fallback;
        }
        if (libssh2_agent_get_identity(h->agent, &h->agent_key, NULL) != 0) goto fallback;
    }
    for (;;) {
        int rc = libssh2_agent_userauth(h->agent, h->o->user, h->agent_key);
        if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
        h->agent_keys_tried++;
        if (rc == 0) {
            agent_done(h);
            return authenticated(s);
        }
        struct libssh2_agent_publickey *prev = h->agent_key;
        if (libssh2_agent_get_identity(h->agent, &h->agent_key, prev) != 0) break;
    }
fallback:
    if (h->agent_keys_tried) {
        char what[64];
        snprintf(what, sizeof what, "%d ssh-agent key(s)", h->agent_keys_tried);
        note_tried(h, what);
    }
    agent_done(h);
    s->state = S_AUTH_FILE;
    return 1;
}

/* The current hop opens a channel to the next one, whose session then starts on it. */
static int step_tunnel(ds_ssh *s, ds_err *err) {
    hop *h = cur(s), *next = &s->hops[s->cur + 1];
    h->tunnel = libssh2_channel_direct_tcpip_ex(h->session, next->o->host, next->o->port, "127.0.0.1", 22);
    if (!h->tunnel) {
        if (libssh2_session_last_errno(h->session) == LIBSSH2_ERROR_EAGAIN) return 0;
        return ds_err_set(err, "%s: cannot open a channel to %s: %s", h->label, next->label, last_error(h->session));
    }
    s->cur++;
    return new_session(s, err);
}

static int step_channel(ds_ssh *s, ds_err *err) {
    hop *h = cur(s);
    s->channel = libssh2_channel_open_session(h->session);
    if (!s->channel) {
        if (libssh2_session_last_errno(h->session) == LIBSSH2_ERROR_EAGAIN) return 0;
        return ds_err_set(err, "%s: cannot open an SSH channel: %s", h->label, last_error(h->session));
    }
    s->state = S_EXEC;
    return 1;
}

static int step_exec(ds_ssh *s, ds_err *err) {
    int rc = libssh2_channel_exec(s->channel, s->command);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    if (rc) return ds_err_set(err, "%s: cannot run the agent: %s", cur(s)->label, ds_ssh_last_error(s));
    s->state = S_OPEN;
    return 1;
}

static const char *phase(ssh_state st) {
    switch (st) {
    case S_CONNECT: return "connecting";
    case S_HANDSHAKE: return "in the SSH handshake";
    case S_AUTH_FILE:
    case S_AUTH_AGENT: return "authenticating";
    case S_TUNNEL: return "opening the ProxyJump channel";
    default: return "starting the agent";
    }
}

/* 1 when a tunnel holds bytes libssh2 already took off the socket: poll cannot see
 * them, so the sessions behind it must be given another turn now. */
static int tunnel_pending(const ds_ssh *s) {
    for (int i = 0; i < s->nhops; i++)
        if (s->hops[i].tunnel && libssh2_poll_channel_read(s->hops[i].tunnel, 0)) return 1;
    return 0;
}

int ds_ssh_open_step(ds_ssh *s, ds_err *err) {
    for (int rounds = 0; rounds < 1000; rounds++) {
        int rc;
        switch (s->state) {
        case S_CONNECT: rc = step_connect(s, err); break;
        case S_HANDSHAKE: rc = step_handshake(s, err); break;
        case S_AUTH_AGENT: rc = step_auth_agent(s, err); break;
        case S_AUTH_FILE: rc = step_auth_file(s, err); break;
        case S_TUNNEL: rc = step_tunnel(s, err); break;
        case S_CHANNEL: rc = step_channel(s, err); break;
        case S_EXEC: rc = step_exec(s, err); break;
        default: return 1;
        }
        if (rc < 0) return -1;
        if (s->state == S_OPEN) return 1;
        if (rc == 0 && !tunnel_pending(s)) break;
    }
    if (ds_now_ms() >= s->deadline_ms)
        return ds_err_set(err, "%s: no answer within the connect timeout (%d s) while %s; is the node up and reachable?",
                          cur(s)->label, (s->o.timeout_ms + 999) / 1000, phase(s->state));
    return 0;
}

int ds_ssh_fd(const ds_ssh *s) { return s->sock; }

short ds_ssh_events(const ds_ssh *s) {
    if (s->state == S_CONNECT) return POLLOUT;
    short ev = POLLIN; /* always: the remote may send at any time */
    for (int i = 0; i <= s->cur && i < s->nhops; i++) {
        /* a session behind a tunnel waits on the socket like the first one */
        if (s->hops[i].session &&
            (libssh2_session_block_directions(s->hops[i].session) & LIBSSH2_SESSION_BLOCK_OUTBOUND))
            ev |= POLLOUT;
    }
    return ev;
}

long long ds_ssh_deadline_ms(const ds_ssh *s) { return s->state == S_OPEN ? -1 : s->deadline_ms; }

ssize_t ds_ssh_read(ds_ssh *s, int stream, void *buf, size_t n) {
    ssize_t r = libssh2_channel_read_ex(s->channel, stream == 2 ? SSH_EXTENDED_DATA_STDERR : 0, buf, n);
    if (r == LIBSSH2_ERROR_EAGAIN) return 0;
    return r < 0 ? -1 : r;
}

ssize_t ds_ssh_write(ds_ssh *s, const void *buf, size_t n) {
    ssize_t r = libssh2_channel_write(s->channel, buf, n);
    if (r == LIBSSH2_ERROR_EAGAIN) return 0;
    return r < 0 ? -1 : r;
}

int ds_ssh_send_eof(ds_ssh *s) {
    int rc = libssh2_channel_send_eof(s->channel);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    return rc == 0 ? 1 : -1;
}

int ds_ssh_eof(ds_ssh *s) { return libssh2_channel_eof(s->channel) == 1; }

int ds_ssh_exec_aux(ds_ssh *s, const char *command) {
    if (s->state != S_OPEN) return -1;
    LIBSSH2_SESSION *session = cur(s)->session;
    if (!s->aux) {
        s->aux = libssh2_channel_open_session(session);
        if (!s->aux) return libssh2_session_last_errno(session) == LIBSSH2_ERROR_EAGAIN ? 0 : -1;
    }
    int rc = libssh2_channel_exec(s->aux, command);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    return rc == 0 ? 1 : -1;
}

void ds_ssh_keepalive(ds_ssh *s) {
    int next;
    if (s->state != S_OPEN) return;
    for (int i = 0; i < s->nhops; i++)
        if (s->hops[i].session && s->hops[i].o->alive_interval_s > 0) libssh2_keepalive_send(s->hops[i].session, &next);
}

void ds_ssh_free(ds_ssh *s) {
    if (!s) return;
    /* Shut the socket first: every libssh2 call below then fails at once instead of
     * waiting for the remote side (the sessions behind tunnels write to it too). */
    if (s->sock >= 0) shutdown(s->sock, SHUT_RDWR);
    if (s->aux) libssh2_channel_free(s->aux);
    if (s->channel) libssh2_channel_free(s->channel);
    /* the innermost first: each session behind a tunnel still writes through it */
    for (int i = s->nhops - 1; i >= 0; i--) {
        hop *h = &s->hops[i];
        agent_done(h);
        if (h->tunnel) libssh2_channel_free(h->tunnel);
        if (h->session) libssh2_session_free(h->session);
    }
    if (s->sock >= 0) close(s->sock);
    free(s->command);
    ds_ssh_opts_free(&s->o);
    free(s);
}
