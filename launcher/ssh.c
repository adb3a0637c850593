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

typedef enum {
    S_CONNECT,
    S_HANDSHAKE,
    S_AUTH_FILE,
    S_AUTH_AGENT,
    S_CHANNEL,
    S_EXEC,
    S_OPEN,
} ssh_state;

struct ds_ssh {
    ds_ssh_opts o;
    char *host, *user, *identity, *known_hosts, *command;
    char *default_identity; /* tried after the agent when no identity is given */
    int sock;
    ssh_state state;
    long long deadline_ms;
    LIBSSH2_SESSION *session;
    LIBSSH2_CHANNEL *channel;
    LIBSSH2_CHANNEL *aux; /* ds_ssh_exec_aux's channel */
    LIBSSH2_AGENT *agent;
    struct libssh2_agent_publickey *agent_key;
    int agent_keys_tried;
    char auth_tried[512]; /* what was tried, for the error message */
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

static int start_connect(ds_ssh *s, ds_err *err) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    int rc = getaddrinfo(s->host, port, &hints, &ai);
    if (rc != 0) return ds_err_set(err, "%s: cannot resolve host: %s", s->host, gai_strerror(rc));
    s->sock = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->sock < 0) {
        freeaddrinfo(ai);
        return ds_err_errno(err, errno, "socket");
    }
    tune_socket(s->sock);
    rc = connect(s->sock, ai->ai_addr, ai->ai_addrlen);
    int e = errno;
    freeaddrinfo(ai);
    if (rc != 0 && e != EINPROGRESS) return ds_err_errno(err, e, "%s:%d: connect", s->host, s->o.port);
    return 0;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

ds_ssh *ds_ssh_start(const ds_ssh_opts *o, const char *command, ds_err *err) {
    ds_ssh *s = calloc(1, sizeof *s);
    if (!s) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    s->o = *o;
    s->sock = -1;
    const char *home = getenv("HOME") ? getenv("HOME") : "/";
    s->host = strdup(o->host);
    s->user = strdup(o->user && o->user[0] ? o->user : getenv("USER") ? getenv("USER") : "root");
    s->identity = dup_or_null(o->identity);
    if (o->known_hosts) s->known_hosts = strdup(o->known_hosts);
    else if (asprintf(&s->known_hosts, "%s/.ssh/known_hosts", home) < 0) s->known_hosts = NULL;
    if (asprintf(&s->default_identity, "%s/.ssh/id_ed25519", home) < 0) s->default_identity = NULL;
    s->command = strdup(command);
    s->deadline_ms = ds_now_ms() + (o->timeout_ms > 0 ? o->timeout_ms : 10000);
    if (!s->host || !s->user || !s->known_hosts || !s->default_identity || !s->command ||
        (o->identity && !s->identity)) {
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

const char *ds_ssh_last_error(ds_ssh *s) {
    char *msg = NULL;
    if (!s->session) return "no session";
    libssh2_session_last_error(s->session, &msg, NULL, 0);
    return msg && msg[0] ? msg : "unknown error";
}

static int step_connect(ds_ssh *s, ds_err *err) {
    struct pollfd p = {.fd = s->sock, .events = POLLOUT};
    if (poll(&p, 1, 0) <= 0) return 0;
    int e = 0;
    socklen_t len = sizeof e;
    getsockopt(s->sock, SOL_SOCKET, SO_ERROR, &e, &len);
    if (e == EINPROGRESS) return 0;
    if (e) return ds_err_errno(err, e, "%s:%d: cannot connect (is sshd running there, is the port right?)", s->host, s->o.port);
    s->session = libssh2_session_init();
    if (!s->session) return ds_err_set(err, "out of memory");
    libssh2_session_set_blocking(s->session, 0);
    libssh2_keepalive_config(s->session, 1, 5);
    s->state = S_HANDSHAKE;
    return 1;
}

static int step_handshake(ds_ssh *s, ds_err *err) {
    int rc = libssh2_session_handshake(s->session, s->sock);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    if (rc) return ds_err_set(err, "%s:%d: SSH handshake failed: %s", s->host, s->o.port, ds_ssh_last_error(s));
    if (ds_knownhosts_verify(s->session, s->host, s->o.port, s->known_hosts, s->o.check, err) != 0) return -1;
    if (s->identity) s->state = S_AUTH_FILE;
    else if (getenv("SSH_AUTH_SOCK") && getenv("SSH_AUTH_SOCK")[0]) s->state = S_AUTH_AGENT;
    else {
        s->identity = s->default_identity;
        s->default_identity = NULL;
        s->state = S_AUTH_FILE;
    }
    return 1;
}

static int auth_failed(ds_ssh *s, ds_err *err) {
    return ds_err_set(err,
                      "%s@%s:%d: public-key authentication failed (tried %s; last error: %s). "
                      "Check that the public key is in ~/.ssh/authorized_keys of %s on the node, "
                      "that [ssh] user and identity are right, and that the key has no passphrase "
                      "(use ssh-agent for those)",
                      s->user, s->host, s->o.port, s->auth_tried[0] ? s->auth_tried : "nothing",
                      ds_ssh_last_error(s), s->user);
}

static void note_tried(ds_ssh *s, const char *what) {
    size_t n = strlen(s->auth_tried);
    snprintf(s->auth_tried + n, sizeof s->auth_tried - n, "%s%s", n ? ", " : "", what);
}

static int step_auth_file(ds_ssh *s, ds_err *err) {
    if (access(s->identity, R_OK) != 0) {
        char what[600];
        snprintf(what, sizeof what, "identity %s (%s)", s->identity, strerror(errno));
        note_tried(s, what);
        return auth_failed(s, err);
    }
    char pub[4200];
    snprintf(pub, sizeof pub, "%s.pub", s->identity);
    int rc = libssh2_userauth_publickey_fromfile_ex(s->session, s->user, (unsigned)strlen(s->user),
                                                    access(pub, R_OK) == 0 ? pub : NULL, s->identity, NULL);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    if (rc) {
        char what[600];
        snprintf(what, sizeof what, "identity %s", s->identity);
        note_tried(s, what);
        return auth_failed(s, err);
    }
    s->state = S_CHANNEL;
    return 1;
}

/* ssh-agent: each key in turn; when none works, the default identity file. */
static int step_auth_agent(ds_ssh *s, ds_err *err) {
    if (!s->agent) {
        s->agent = libssh2_agent_init(s->session);
        if (!s->agent || libssh2_agent_connect(s->agent) != 0 || libssh2_agent_list_identities(s->agent) != 0) {
            note_tried(s, "ssh-agent (unreachable)");
            goto fallback;
        }
        if (libssh2_agent_get_identity(s->agent, &s->agent_key, NULL) != 0) goto fallback;
    }
    for (;;) {
        int rc = libssh2_agent_userauth(s->agent, s->user, s->agent_key);
        if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
        s->agent_keys_tried++;
        if (rc == 0) {
            s->state = S_CHANNEL;
            return 1;
        }
        struct libssh2_agent_publickey *prev = s->agent_key;
        if (libssh2_agent_get_identity(s->agent, &s->agent_key, prev) != 0) break;
    }
fallback:
    if (s->agent_keys_tried) {
        char what[64];
        snprintf(what, sizeof what, "%d ssh-agent key(s)", s->agent_keys_tried);
        note_tried(s, what);
    }
    if (s->agent) {
        libssh2_agent_disconnect(s->agent);
        libssh2_agent_free(s->agent);
        s->agent = NULL;
    }
    if (!s->default_identity) return auth_failed(s, err);
    s->identity = s->default_identity;
    s->default_identity = NULL;
    s->state = S_AUTH_FILE;
    return 1;
}

static int step_channel(ds_ssh *s, ds_err *err) {
    s->channel = libssh2_channel_open_session(s->session);
    if (!s->channel) {
        if (libssh2_session_last_errno(s->session) == LIBSSH2_ERROR_EAGAIN) return 0;
        return ds_err_set(err, "%s:%d: cannot open an SSH channel: %s", s->host, s->o.port, ds_ssh_last_error(s));
    }
    s->state = S_EXEC;
    return 1;
}

static int step_exec(ds_ssh *s, ds_err *err) {
    int rc = libssh2_channel_exec(s->channel, s->command);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    if (rc) return ds_err_set(err, "%s:%d: cannot run the agent: %s", s->host, s->o.port, ds_ssh_last_error(s));
    s->state = S_OPEN;
    return 1;
}

static const char *phase(ssh_state st) {
    switch (st) {
    case S_CONNECT: return "connecting";
    case S_HANDSHAKE: return "in the SSH handshake";
    case S_AUTH_FILE:
    case S_AUTH_AGENT: return "authenticating";
    default: return "starting the agent";
    }
}

int ds_ssh_open_step(ds_ssh *s, ds_err *err) {
    for (;;) {
        int rc;
        switch (s->state) {
        case S_CONNECT: rc = step_connect(s, err); break;
        case S_HANDSHAKE: rc = step_handshake(s, err); break;
        case S_AUTH_FILE: rc = step_auth_file(s, err); break;
        case S_AUTH_AGENT: rc = step_auth_agent(s, err); break;
        case S_CHANNEL: rc = step_channel(s, err); break;
        case S_EXEC: rc = step_exec(s, err); break;
        default: return 1;
        }
        if (rc < 0) return -1;
        if (s->state == S_OPEN) return 1;
        if (rc == 0) break;
    }
    if (ds_now_ms() >= s->deadline_ms)
        return ds_err_set(err, "%s:%d: no answer within the connect timeout (%d s) while %s; is the node up and reachable?",
                          s->host, s->o.port, (s->o.timeout_ms + 999) / 1000, phase(s->state));
    return 0;
}

int ds_ssh_fd(const ds_ssh *s) { return s->sock; }

short ds_ssh_events(const ds_ssh *s) {
    if (s->state == S_CONNECT) return POLLOUT;
    if (!s->session) return POLLIN;
    int dir = libssh2_session_block_directions(s->session);
    short ev = POLLIN; /* always: the remote may send at any time */
    if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
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
    if (!s->aux) {
        s->aux = libssh2_channel_open_session(s->session);
        if (!s->aux) return libssh2_session_last_errno(s->session) == LIBSSH2_ERROR_EAGAIN ? 0 : -1;
    }
    int rc = libssh2_channel_exec(s->aux, command);
    if (rc == LIBSSH2_ERROR_EAGAIN) return 0;
    return rc == 0 ? 1 : -1;
}

void ds_ssh_keepalive(ds_ssh *s) {
    int next;
    if (s->session && s->state == S_OPEN) libssh2_keepalive_send(s->session, &next);
}

void ds_ssh_free(ds_ssh *s) {
    if (!s) return;
    /* Shut the socket first: every libssh2 call below then fails at once instead of
     * waiting for the remote side. */
    if (s->sock >= 0) shutdown(s->sock, SHUT_RDWR);
    if (s->agent) {
        libssh2_agent_disconnect(s->agent);
        libssh2_agent_free(s->agent);
    }
    if (s->aux) libssh2_channel_free(s->aux);
    if (s->channel) libssh2_channel_free(s->channel);
    if (s->session) libssh2_session_free(s->session);
    if (s->sock >= 0) close(s->sock);
    free(s->host);
    free(s->user);
    free(s->identity);
    free(s->known_hosts);
    free(s->default_identity);
    free(s->command);
    free(s);
}
