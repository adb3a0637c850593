/* The thread that serves the srun step (srun.h): one poll loop over srun's stdin,
 * stdout, stderr and exit, the link listener, connections that have not said JOIN yet,
 * and for each node its link and the three pipes to the controller. */
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "agent_proto.h"
#include "slurm_hostlist.h"
#include "srun_step.h"
#include "ds_clock.h"

#define JOIN_WITHIN_MS 10000     /* a connection must say JOIN this soon */
#define MAX_JOIN (1 + 4 + 4 + 1024)
#define BUFFERED (1u << 20)      /* per direction and node: read no more until it drains */
#define NO_PIDFD_TICK_MS 100

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* A whole line into a pipe to the controller; lines up to PIPE_BUF are written at once
 * or not at all, so a full pipe loses a line, never half of one. */
static void put_line(int fd, const char *text) {
    char line[4000];
    int n = snprintf(line, sizeof line, "%s\n", text);
    if (fd < 0 || n <= 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1, line[n - 1] = '\n';
    ssize_t ignored = write(fd, line, (size_t)n);
    (void)ignored;
}

void ds_srun_fail_node(ds_srun_step *st, srun_node *sn, const char *why) {
    (void)st;
    if (sn->done) return;
    if (why) put_line(sn->err_w, why);
    close_fd(&sn->in_r);
    close_fd(&sn->out_w);
    close_fd(&sn->err_w);
    if (sn->sock >= 0) shutdown(sn->sock, SHUT_RDWR); /* the agent's dead-man switch */
    close_fd(&sn->sock);
    ds_buf_free(&sn->to_sock);
    ds_buf_free(&sn->to_out);
    sn->done = 1;
}

static void log_line(ds_srun_step *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(ds_srun_step *st, const char *fmt, ...) {
    if (!st->log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(st->log, fmt, ap);
    va_end(ap);
    fputc('\n', st->log);
    fflush(st->log);
}

static void remember(ds_srun_step *st, const char *line) {
    if (st->nlast == SRUN_LAST_LINES) {
        memmove(st->last[0], st->last[1], sizeof st->last[0] * (SRUN_LAST_LINES - 1));
        st->nlast--;
    }
    snprintf(st->last[st->nlast++], sizeof st->last[0], "%s", line);
}

static srun_node *node_named(ds_srun_step *st, const char *name, size_t len) {
    for (int i = 0; i < st->nnodes; i++)
        if (strlen(st->nodes[i].host) == len && !memcmp(st->nodes[i].host, name, len)) return &st->nodes[i];
    return NULL;
}

/* ---- srun's output ---- */

/* "srun: error: Node failure on n[2-3]": those nodes are lost. */
static int node_failure(ds_srun_step *st, const char *line) {
    const char *p = strstr(line, "Node failure on ");
    if (!p) return 0;
    char **names;
    int n;
    ds_err err;
    if (ds_slurm_hostlist_expand(p + 16, st->nnodes + 16, &names, &n, &err) != 0) return 0;
    char why[700];
    snprintf(why, sizeof why, "Slurm reports a node failure (%.600s)", line);
    for (int i = 0; i < n; i++) {
        srun_node *sn = node_named(st, names[i], strlen(names[i]));
        if (sn) ds_srun_fail_node(st, sn, why);
    }
    ds_slurm_names_free(names, n);
    return 1;
}

/* A line srun wrote: a task's ("K: text", from --label) goes to that task's node as its
 * agent's stderr; srun's own goes to the node it names; everything is in srun.log. The
 * rest is shown on the terminal and kept for the failure of nodes that never joined. */
static void route_line(ds_srun_step *st, const char *line) {
    log_line(st, "%s", line);
    const char *p = line;
    while (*p == ' ') p++;
    const char *digits = p;
    while (isdigit((unsigned char)*p)) p++;
    if (p > digits && p[0] == ':' && p[1] == ' ') {
        int task = atoi(digits);
        for (int i = 0; i < st->nnodes; i++) {
            srun_node *sn = &st->nodes[i];
            if (sn->procid != task) continue;
            if (!sn->done) put_line(sn->err_w, p + 2);
            return; /* after its node ended: srun.log only */
        }
    } else if (node_failure(st, line)) {
        return;
    } else if (!strncmp(line, "srun: error: ", 13)) {
        /* "srun: error: n1: task 0: Exited with exit code 1" */
        const char *name = line + 13;
        size_t len = strcspn(name, ": ");
        srun_node *sn = name[len] == ':' ? node_named(st, name, len) : NULL;
        if (sn) {
            if (!sn->done) put_line(sn->err_w, line);
            return;
        }
    }
    remember(st, line);
    if (!st->stopping) fprintf(stderr, "[srun] %s\n", line);
}

/* Reads what srun wrote on one stream and routes the complete lines. */
static void read_output(ds_srun_step *st, int *fd, ds_buf *partial) {
    for (;;) {
        char buf[65536];
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n <= 0) {
            if (ds_buf_unread(partial)) route_line(st, ds_buf_str(partial));
            ds_buf_clear(partial);
            close_fd(fd);
            return;
        }
        ds_buf_put(partial, buf, (size_t)n);
        for (;;) {
            const char *s = ds_buf_str(partial);
            const char *nl = memchr(s, '\n', ds_buf_unread(partial));
            if (!nl) break;
            size_t len = (size_t)(nl - s);
            char line[4096];
            snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), s);
            ds_buf_consume(partial, len + 1);
            route_line(st, line);
        }
        if (ds_buf_unread(partial) > 65536) { /* a line without end: pass it on in pieces */
            route_line(st, ds_buf_str(partial));
            ds_buf_clear(partial);
        }
    }
}

/* ---- srun's end ---- */

static void describe_status(int status, char *buf, size_t cap) {
    if (WIFSIGNALED(status)) snprintf(buf, cap, "killed by signal %d", WTERMSIG(status));
    else snprintf(buf, cap, "exit %d", WEXITSTATUS(status));
}

/* Agents that never joined will not now: their nodes end with what srun said last. */
static void srun_ended(ds_srun_step *st) {
    char how[64], said[SRUN_LAST_LINES * 520] = "";
    describe_status(st->status, how, sizeof how);
    log_line(st, "# srun ended: %s", how);
    size_t len = 0;
    for (int i = 0; i < st->nlast; i++)
        len += (size_t)snprintf(said + len, sizeof said - len, "%s%s", i ? " | " : "", st->last[i]);
    for (int i = 0; i < st->nnodes; i++) {
        srun_node *sn = &st->nodes[i];
        if (sn->done || sn->sock >= 0) continue;
        char why[sizeof said + 256];
        snprintf(why, sizeof why, "srun ended (%s) before the agent on %s connected%s%s", how, sn->host,
                 st->nlast ? "; srun said: " : " (srun.log in the attempt's logs has its output)", said);
        ds_srun_fail_node(st, sn, why);
    }
}

static void reap_srun(ds_srun_step *st) {
    if (st->pid <= 0) return;
    int status;
    if (waitpid(st->pid, &status, WNOHANG) != st->pid) return;
    st->status = status;
    st->pid = 0;
    /* what it wrote last is in the pipes still: read it before reporting */
    if (st->err_r >= 0) read_output(st, &st->err_r, &st->err_line);
    if (st->out_r >= 0) read_output(st, &st->out_r, &st->out_line);
    srun_ended(st);
}

/* ---- JOIN ---- */

static void accept_links(ds_srun_step *st) {
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t salen = sizeof sa;
        int fd = accept4(st->listen_fd, (struct sockaddr *)&sa, &salen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        srun_pending *p = realloc(st->pending, sizeof *p * (size_t)(st->npending + 1));
        if (!p) {
            close(fd);
            return;
        }
        st->pending = p;
        p = &st->pending[st->npending++];
        *p = (srun_pending){.fd = fd, .deadline_ms = ds_now_ms() + JOIN_WITHIN_MS};
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (sa.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
        } else if (sa.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, host, sizeof host);
            port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        }
        snprintf(p->peer, sizeof p->peer, "%s:%d", host, port);
    }
}

static void drop_pending(ds_srun_step *st, int i, const char *why) {
    srun_pending *p = &st->pending[i];
    if (why) {
        log_line(st, "# refused a link from %s: %s", p->peer, why);
        fprintf(stderr, "dslaunch: srun link: refused a connection from %s: %s\n", p->peer, why);
    }
    close(p->fd);
    ds_buf_free(&p->in);
    st->pending[i] = st->pending[--st->npending];
}

/* Checks "TOKEN NODE PROCID STEP" and gives the connection to that node. NULL on
 * success, else why it was refused. */
static const char *join(ds_srun_step *st, srun_pending *p, const ds_frame *f, char *why, size_t cap) {
    char msg[1100];
    size_t len = f->len < sizeof msg - 1 ? f->len : sizeof msg - 1;
    memcpy(msg, f->payload, len);
    msg[len] = 0;
    char *save, *token = strtok_r(msg, " ", &save), *node = strtok_r(NULL, " ", &save);
    char *procid = strtok_r(NULL, " ", &save), *stepid = strtok_r(NULL, " ", &save);
    int token_ok = token && strlen(token) == DS_STORE_TOKEN_LEN &&
                   ds_store_token_equal(token, st->token, DS_STORE_TOKEN_LEN);
    if (token) memset(token, 0, strlen(token));
    if (!token_ok) return "wrong token";
    if (!node || !procid || !stepid) return "malformed JOIN";
    srun_node *sn = node_named(st, node, strlen(node));
    if (!sn || sn->sock >= 0 || sn->done) {
        snprintf(why, cap, "node '%.200s' is not one of the step's, or joined already", node);
        return why;
    }
    sn->sock = p->fd;
    sn->procid = atoi(procid);
    log_line(st, "# node %d (%s) joined: task %s, step %s, from %s", sn->index, sn->host, procid, stepid, p->peer);
    ds_buf_consume(&p->in, DS_FRAME_HEADER + f->len);
    if (ds_buf_unread(&p->in)) ds_buf_put(&sn->to_out, ds_buf_head(&p->in), ds_buf_unread(&p->in));
    return NULL;
}

static void read_pending(ds_srun_step *st, int i) {
    srun_pending *p = &st->pending[i];
    char buf[MAX_JOIN];
    ssize_t n = read(p->fd, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        drop_pending(st, i, "closed before JOIN");
        return;
    }
    ds_buf_put(&p->in, buf, (size_t)n);
    ds_frame f;
    int r = ds_frame_parse(&p->in, &f);
    if (r == 0 && ds_buf_unread(&p->in) < MAX_JOIN) return;
    if (r != 1 || f.type != DS_FRAME_JOIN) {
        drop_pending(st, i, "not a JOIN");
        return;
    }
    char why[300];
    const char *refused = join(st, p, &f, why, sizeof why);
    if (refused) {
        drop_pending(st, i, refused);
        return;
    }
    ds_buf_free(&p->in);
    st->pending[i] = st->pending[--st->npending]; /* the fd now belongs to the node */
}

/* ---- a node's bytes ---- */

/* Moves what can move now between the controller's pipes and the agent's link. */
static void pump(ds_srun_step *st, srun_node *sn, short in_ev, short sock_ev, short out_ev) {
    char buf[65536];
    if (out_ev & (POLLERR | POLLHUP)) { /* the controller gave the node up */
        ds_srun_fail_node(st, sn, NULL);
        return;
    }
    if (in_ev) {
        ssize_t n = read(sn->in_r, buf, sizeof buf);
        if (n > 0) ds_buf_put(&sn->to_sock, buf, (size_t)n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) sn->in_eof = 1, close_fd(&sn->in_r);
    }
    if (sock_ev & POLLIN) {
        ssize_t n = read(sn->sock, buf, sizeof buf);
        if (n > 0) ds_buf_put(&sn->to_out, buf, (size_t)n);
        else if (n == 0 || (errno != EAGAIN && errno != EINTR)) sn->sock_eof = 1;
    } else if (sock_ev & (POLLERR | POLLHUP)) {
        sn->sock_eof = 1;
    }
    while (ds_buf_unread(&sn->to_sock) && !sn->sock_eof) {
        ssize_t n = send(sn->sock, ds_buf_head(&sn->to_sock), ds_buf_unread(&sn->to_sock), MSG_NOSIGNAL);
        if (n > 0) ds_buf_consume(&sn->to_sock, (size_t)n);
        else break;
    }
    if (sn->in_eof && !ds_buf_unread(&sn->to_sock) && sn->sock >= 0 && !sn->sock_eof) {
        shutdown(sn->sock, SHUT_WR); /* the controller stopped the node: so does the agent */
        sn->in_eof = 2;
    }
    while (ds_buf_unread(&sn->to_out)) {
        ssize_t n = write(sn->out_w, ds_buf_head(&sn->to_out), ds_buf_unread(&sn->to_out));
        if (n > 0) ds_buf_consume(&sn->to_out, (size_t)n);
        else if (n < 0 && errno == EAGAIN) break;
        else {
            ds_srun_fail_node(st, sn, NULL);
            return;
        }
    }
    /* The agent is gone and all it said is passed on: its node ends. */
    if (sn->sock_eof && !ds_buf_unread(&sn->to_out)) ds_srun_fail_node(st, sn, NULL);
}

/* ---- the loop ---- */

enum role { R_WAKE, R_LISTEN, R_PIDFD, R_OUT, R_ERR, R_IN, R_PENDING, R_NODE_IN, R_NODE_SOCK, R_NODE_OUT };

typedef struct slot {
    enum role role;
    int i; /* pending index or node index */
} slot;

static int any_unjoined(const ds_srun_step *st) {
    for (int i = 0; i < st->nnodes; i++)
        if (!st->nodes[i].done && st->nodes[i].sock < 0) return 1;
    return 0;
}

static void begin_end(ds_srun_step *st) {
    close_fd(&st->in_w);
    close_fd(&st->listen_fd);
    while (st->npending) drop_pending(st, st->npending - 1, NULL);
    for (int i = 0; i < st->nnodes; i++) ds_srun_fail_node(st, &st->nodes[i], NULL);
}

void *ds_srun_serve(void *arg) {
    ds_srun_step *st = arg;
    long long join_by = ds_now_ms() + st->join_timeout_ms, end_by = 0;
    int signalled = 0;
    struct pollfd *pf = NULL;
    slot *slots = NULL;
    for (;;) {
        if (st->stopping && st->pid <= 0 && st->out_r < 0 && st->err_r < 0) break;
        long long now = ds_now_ms();
        if (st->stopping && now >= end_by) {
            if (st->pid <= 0 || signalled == 2) break; /* srun gone, or its output never ends */
            /* srun still runs: cancel the step, then kill srun itself */
            log_line(st, "# srun still runs: %s", signalled ? "killing it" : "cancelling the step (SIGTERM)");
            kill(st->pid, signalled ? SIGKILL : SIGTERM);
            signalled++;
            end_by = now + st->grace_ms;
        }
        int cap = 6 + st->npending + 3 * st->nnodes, n = 0;
        struct pollfd *npf = realloc(pf, sizeof *pf * (size_t)cap);
        slot *nslots = realloc(slots, sizeof *slots * (size_t)cap);
        if (npf) pf = npf;
        if (nslots) slots = nslots;
        if (!npf || !nslots) break;
#define ADD(fd_, ev_, role_, i_) (pf[n] = (struct pollfd){.fd = (fd_), .events = (ev_)}, slots[n++] = (slot){(role_), (i_)})
        ADD(st->wake[0], POLLIN, R_WAKE, 0);
        if (st->listen_fd >= 0) ADD(st->listen_fd, POLLIN, R_LISTEN, 0); /* late strangers are refused */
        if (st->pid > 0 && st->pidfd >= 0) ADD(st->pidfd, POLLIN, R_PIDFD, 0);
        if (st->out_r >= 0) ADD(st->out_r, POLLIN, R_OUT, 0);
        if (st->err_r >= 0) ADD(st->err_r, POLLIN, R_ERR, 0);
        if (st->in_w >= 0 && ds_buf_unread(&st->bootstrap)) ADD(st->in_w, POLLOUT, R_IN, 0);
        for (int i = 0; i < st->npending; i++) ADD(st->pending[i].fd, POLLIN, R_PENDING, i);
        for (int i = 0; i < st->nnodes; i++) {
            srun_node *sn = &st->nodes[i];
            if (sn->done) continue;
            ADD(sn->out_w, ds_buf_unread(&sn->to_out) ? POLLOUT : 0, R_NODE_OUT, i);
            if (sn->sock < 0) continue;
            short ev = (short)((!sn->sock_eof && ds_buf_unread(&sn->to_out) < BUFFERED ? POLLIN : 0) |
                               (ds_buf_unread(&sn->to_sock) ? POLLOUT : 0));
            ADD(sn->sock, ev, R_NODE_SOCK, i);
            if (sn->in_r >= 0 && ds_buf_unread(&sn->to_sock) < BUFFERED) ADD(sn->in_r, POLLIN, R_NODE_IN, i);
        }
#undef ADD
        long long wake = now + 60000;
        if (!st->stopping && any_unjoined(st) && join_by < wake) wake = join_by;
        for (int i = 0; i < st->npending; i++)
            if (st->pending[i].deadline_ms < wake) wake = st->pending[i].deadline_ms;
        if (st->pid > 0 && st->pidfd < 0 && now + NO_PIDFD_TICK_MS < wake) wake = now + NO_PIDFD_TICK_MS;
        if (st->stopping && end_by < wake) wake = end_by;
        if (poll(pf, (nfds_t)n, wake > now ? (int)(wake - now) : 0) < 0 && errno != EINTR) break;

        /* srun's output first: a node failure it reports precedes the deaths it causes */
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents) continue;
            if (slots[k].role == R_OUT) read_output(st, &st->out_r, &st->out_line);
            if (slots[k].role == R_ERR) read_output(st, &st->err_r, &st->err_line);
        }
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents) continue;
            switch (slots[k].role) {
            case R_WAKE:
                if (!st->stopping) {
                    st->stopping = 1;
                    end_by = ds_now_ms() + st->grace_ms;
                    begin_end(st);
                }
                break;
            case R_LISTEN:
                accept_links(st);
                break;
            case R_IN: {
                ssize_t w = write(st->in_w, ds_buf_head(&st->bootstrap), ds_buf_unread(&st->bootstrap));
                if (w > 0) ds_buf_consume(&st->bootstrap, (size_t)w);
                else if (w < 0 && errno != EAGAIN) ds_buf_clear(&st->bootstrap); /* srun is gone: reap will tell */
                break;
            }
            default:
                break;
            }
        }
        /* pending connections, back to front: a finished one leaves the array */
        for (int k = n - 1; k >= 0; k--)
            if (pf[k].revents && slots[k].role == R_PENDING && slots[k].i < st->npending) read_pending(st, slots[k].i);
        for (int i = st->npending - 1; i >= 0; i--)
            if (ds_now_ms() >= st->pending[i].deadline_ms) drop_pending(st, i, "no JOIN within 10 s");
        /* every node's bytes: gather its events, then move what can move */
        for (int i = 0; i < st->nnodes; i++) {
            srun_node *sn = &st->nodes[i];
            if (sn->done) continue;
            short in_ev = 0, sock_ev = 0, out_ev = 0;
            for (int k = 0; k < n; k++) {
                if (slots[k].i != i || !pf[k].revents) continue;
                if (slots[k].role == R_NODE_IN) in_ev = pf[k].revents;
                if (slots[k].role == R_NODE_SOCK) sock_ev = pf[k].revents;
                if (slots[k].role == R_NODE_OUT) out_ev = pf[k].revents;
            }
            if (sn->sock >= 0 || out_ev) pump(st, sn, in_ev, sock_ev, out_ev);
        }
        reap_srun(st);
        if (!st->stopping && any_unjoined(st) && ds_now_ms() >= join_by) {
            for (int i = 0; i < st->nnodes; i++) {
                srun_node *sn = &st->nodes[i];
                if (sn->done || sn->sock >= 0) continue;
                char why[400];
                snprintf(why, sizeof why, "the agent on %s did not connect within %d s of srun's start (srun may be "
                                          "waiting for resources: see srun.log in the attempt's logs)",
                         sn->host, st->join_timeout_ms / 1000);
                ds_srun_fail_node(st, sn, why);
            }
        }
    }
    free(pf);
    free(slots);
    return NULL;
}
