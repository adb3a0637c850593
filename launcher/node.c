#include "node.h"

#include "ds_clock.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void ds_node_wake(ds_node *n) {
    if (!n->wakes || n->woken) return;
    n->woken = 1;
    n->wake_next = n->wakes->head;
    n->wakes->head = n;
}

/* libssh2 may hold data for it: the next pass turns it whether or not poll says so. */
static void set_pending(ds_node *n) {
    n->pending = 1;
    ds_node_wake(n);
}

int ds_node_start_local(ds_node *n, char *const argv[], ds_err *err) {
    n->via_ssh = 0;
    if (ds_local_start(&n->local, argv, err) != 0) return -1;
    n->state = DS_NODE_STARTED;
    ds_node_wake(n); /* its descriptors to register, its plan to send */
    return 0;
}

int ds_node_start_ssh(ds_node *n, ds_ssh_opts *o, const char *command, ds_err *err) {
    n->via_ssh = 1;
    n->local.pid = 0;
    n->local.in_fd = n->local.out_fd = n->local.err_fd = -1;
    n->ssh = ds_ssh_start(o, command, err);
    if (!n->ssh) return -1;
    n->state = DS_NODE_CONNECTING;
    ds_node_wake(n);
    return 0;
}

int ds_node_start_piped(ds_node *n, int far[3], ds_err *err) {
    int p[3][2];
    for (int k = 0; k < 3; k++) {
        if (pipe2(p[k], O_CLOEXEC | O_NONBLOCK) == 0) continue;
        int e = errno;
        for (int j = 0; j < k; j++) close(p[j][0]), close(p[j][1]);
        return ds_err_errno(err, e, "pipe");
    }
    n->via_ssh = 0;
    n->local = (ds_local){.pid = 0, .in_fd = p[0][1], .out_fd = p[1][0], .err_fd = p[2][0]};
    n->reaped = 1;
    n->state = DS_NODE_STARTED;
    ds_node_wake(n);
    far[0] = p[0][0];
    far[1] = p[1][1];
    far[2] = p[2][1];
    return 0;
}

static void fail(ds_node *n, const char *fmt, const char *detail) {
    if (!n->failed) {
        snprintf(n->error, sizeof n->error, fmt, detail);
        n->failed_wall_ms = ds_wall_ms();
    }
    n->failed = 1;
}

int ds_node_pollfds(ds_node *n, struct pollfd *pf) {
    if (n->state == DS_NODE_DONE || n->state == DS_NODE_QUEUED) return 0;
    if (n->via_ssh) {
        pf[0] = (struct pollfd){.fd = ds_ssh_fd(n->ssh), .events = ds_ssh_events(n->ssh)};
        return 1;
    }
    int k = 0;
    if (n->local.out_fd >= 0) pf[k++] = (struct pollfd){.fd = n->local.out_fd, .events = POLLIN};
    if (n->local.err_fd >= 0) pf[k++] = (struct pollfd){.fd = n->local.err_fd, .events = POLLIN};
    if (n->local.in_fd >= 0 && (ds_buf_unread(&n->to_agent) || n->close_stdin))
        pf[k++] = (struct pollfd){.fd = n->local.in_fd, .events = POLLOUT};
    return k;
}

/* ---- transport: the same four operations over pipes or a channel ---- */

/* Bytes read, 0 = nothing now, -1 = EOF or error. */
static ssize_t t_read(ds_node *n, int stream, void *buf, size_t cap) {
    if (n->via_ssh) {
        ssize_t r = ds_ssh_read(n->ssh, stream, buf, cap);
        if (r == 0 && ds_ssh_eof(n->ssh)) return -1;
        return r;
    }
    int fd = stream == 1 ? n->local.out_fd : n->local.err_fd;
    if (fd < 0) return -1;
    ssize_t r = read(fd, buf, cap);
    if (r > 0) return r;
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return -1;
}

static ssize_t t_write(ds_node *n, const void *buf, size_t len) {
    if (n->via_ssh) return ds_ssh_write(n->ssh, buf, len);
    ssize_t w = write(n->local.in_fd, buf, len);
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
    return w;
}

/* 1 done, 0 again. */
static int t_close_stdin(ds_node *n) {
    if (n->via_ssh) return ds_ssh_send_eof(n->ssh) != 0;
    close(n->local.in_fd);
    n->local.in_fd = -1;
    return 1;
}

static void t_close_stream(ds_node *n, int stream) {
    if (n->via_ssh) return;
    int *fd = stream == 1 ? &n->local.out_fd : &n->local.err_fd;
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

/* ---- I/O ---- */

static void flush_out(ds_node *n) {
    while (ds_buf_unread(&n->to_agent) && !n->stdin_closed) {
        ssize_t w = t_write(n, ds_buf_head(&n->to_agent), ds_buf_unread(&n->to_agent));
        if (n->via_ssh) set_pending(n); /* writing can make libssh2 read (window adjusts, data) */
        if (w == 0) return;
        if (w < 0) {
            /* The agent is gone; reading its end will tell why. */
            ds_buf_clear(&n->to_agent);
            n->stdin_closed = 1;
            return;
        }
        ds_buf_consume(&n->to_agent, (size_t)w);
    }
    if (n->close_stdin && !n->stdin_closed && !ds_buf_unread(&n->to_agent) && t_close_stdin(n)) n->stdin_closed = 1;
}

static void parse_frames(ds_node *n, const ds_node_handler *h) {
    for (;;) {
        ds_frame f;
        int p = ds_frame_parse(&n->from_agent, &f);
        if (p < 0) {
            fail(n, "%s", "the agent sent malformed data (is dsrun the same version on every node?)");
            ds_buf_clear(&n->from_agent);
            ds_node_stop(n);
            return;
        }
        if (p == 0) return;
        h->frame(h->ctx, n, &f);
        ds_buf_consume(&n->from_agent, DS_FRAME_HEADER + f.len);
    }
}

static void agent_lines(ds_node *n, const ds_node_handler *h, int at_eof) {
    while (ds_buf_unread(&n->err_line)) {
        const unsigned char *head = ds_buf_head(&n->err_line);
        size_t have = ds_buf_unread(&n->err_line);
        const unsigned char *nl = memchr(head, '\n', have);
        if (!nl && !at_eof && have < 4096) return;
        size_t len = nl ? (size_t)(nl - head) : have;
        if (len > 4095) len = 4095;
        char line[4096];
        memcpy(line, head, len);
        line[len] = 0;
        ds_buf_consume(&n->err_line, nl && len == (size_t)(nl - head) ? len + 1 : len);
        if (line[0]) snprintf(n->last_agent_line, sizeof n->last_agent_line, "%.500s", line);
        h->agent_line(h->ctx, n, line);
    }
}

/* Returns 1 when it read something or reached EOF. */
static int read_stream(ds_node *n, int stream, const ds_node_handler *h) {
    int *eof = stream == 1 ? &n->out_eof : &n->err_eof;
    unsigned char buf[65536];
    int progress = 0;
    for (int rounds = 0; !*eof && rounds < 64; rounds++) {
        ssize_t r = t_read(n, stream, buf, sizeof buf);
        if (r == 0) return progress;
        progress = 1;
        if (r < 0) {
            *eof = 1;
            t_close_stream(n, stream);
            if (stream == 2) agent_lines(n, h, 1);
            return 1;
        }
        if (ds_buf_put(stream == 1 ? &n->from_agent : &n->err_line, buf, (size_t)r) != 0) {
            fail(n, "%s", "out of memory");
            return 1;
        }
        if (stream == 1) parse_frames(n, h);
        else agent_lines(n, h, 0);
    }
    return progress;
}

static void check_done(ds_node *n) {
    if (n->state == DS_NODE_DONE || !n->out_eof || !n->err_eof) return;
    if (!n->via_ssh && !n->reaped) return;
    if (!n->bye && n->last_agent_line[0])
        fail(n, "the agent ended without saying goodbye; its last words: %s", n->last_agent_line);
    else if (!n->bye)
        fail(n, "%s", "the agent ended without saying goodbye (killed, or its node went down?)");
    n->state = DS_NODE_DONE;
    if (n->ssh) {
        ds_ssh_free(n->ssh);
        n->ssh = NULL;
    }
    if (n->local.in_fd >= 0) close(n->local.in_fd);
    n->local.in_fd = -1;
}

void ds_node_io(ds_node *n, const ds_node_handler *h) {
    if (n->state == DS_NODE_DONE || n->state == DS_NODE_QUEUED) return;
    if (n->state == DS_NODE_CONNECTING) {
        ds_err err = {{0}};
        int rc = ds_ssh_open_step(n->ssh, &err);
        if (rc < 0) {
            fail(n, "%s", err.msg);
            ds_node_abandon(n, NULL);
            return;
        }
        if (rc == 0) return;
        n->state = DS_NODE_STARTED;
    }
    if (n->kill_cmd && !n->kill_sent && n->ssh && ds_ssh_exec_aux(n->ssh, n->kill_cmd) != 0) n->kill_sent = 1;
    /* Over SSH, reading one stream can pull the other's data (or the EOF) off the socket
     * into libssh2's buffers, where poll cannot see it: go round until nothing moves. */
    n->pending = 0;
    for (int rounds = 0; rounds < 16; rounds++) {
        flush_out(n);
        int moved = read_stream(n, 1, h);
        moved |= read_stream(n, 2, h);
        if (!moved || !n->via_ssh) break;
        if (rounds == 15) set_pending(n); /* more may be there: next pass */
    }
    flush_out(n);
    /* libssh2 said "again" to an EOF or a kill: poll may never say when (it is not
     * waiting on the socket for it), so the next pass tries at once. */
    if (n->via_ssh && ((n->close_stdin && !n->stdin_closed) || (n->kill_cmd && !n->kill_sent))) set_pending(n);
    check_done(n);
}

int ds_node_turn(const ds_node *n, int ready, long long now_ms) {
    if (n->state == DS_NODE_DONE || n->state == DS_NODE_QUEUED) return 0;
    /* (a node with no process of its own to reap, relayed or in an srun step, is "reaped"
     * from the start: its pipes' hangup says when it ends) */
    if (ready || n->pending || (n->kill_cmd && !n->kill_sent) || (!n->via_ssh && n->reaped && n->local.pid > 0))
        return 1;
    if ((ds_buf_unread(&n->to_agent) || n->close_stdin) && !n->stdin_closed) return 1;
    long long d = ds_node_deadline_ms(n);
    return d >= 0 && now_ms >= d;
}


void ds_node_reap(ds_node *n) {
    if (n->via_ssh || n->reaped || n->local.pid <= 0) return;
    int st;
    if (waitpid(n->local.pid, &st, WNOHANG) != n->local.pid) return;
    n->reaped = 1;
    ds_node_wake(n);
}

void ds_node_stop(ds_node *n) {
    if (n->state == DS_NODE_CONNECTING || n->state == DS_NODE_QUEUED) {
        ds_node_abandon(n, NULL);
        return;
    }
    n->close_stdin = 1;
    if (n->state == DS_NODE_DONE) return;
    flush_out(n);
    ds_node_wake(n); /* what flush_out could not send or close waits for its turns */
}

void ds_node_kill_hard(ds_node *n, const char *remote_cmd) {
    if (n->state == DS_NODE_DONE) return;
    if (!n->via_ssh) {
        if (n->local.pid > 0 && !n->reaped) kill(n->local.pid, SIGKILL);
        return;
    }
    if (n->state == DS_NODE_CONNECTING || n->kill_cmd) return;
    n->kill_cmd = strdup(remote_cmd);
    ds_node_wake(n);
}

void ds_node_abandon(ds_node *n, const char *why) {
    if (why) fail(n, "%s", why);
    if (n->ssh) {
        ds_ssh_free(n->ssh); /* the remote agent sees EOF on stdin and stops its node */
        n->ssh = NULL;
    }
    if (!n->via_ssh && n->local.pid > 0 && !n->reaped) {
        kill(n->local.pid, SIGKILL); /* its workers follow: death signal and lifeline */
        waitpid(n->local.pid, NULL, 0);
        n->reaped = 1;
    }
    int *fds[3] = {&n->local.in_fd, &n->local.out_fd, &n->local.err_fd};
    for (int i = 0; i < 3; i++)
        if (*fds[i] >= 0) {
            close(*fds[i]);
            *fds[i] = -1;
        }
    n->out_eof = n->err_eof = 1;
    n->state = DS_NODE_DONE;
    ds_node_wake(n); /* its registrations go, its loop counts it done */
}

long long ds_node_deadline_ms(const ds_node *n) {
    return n->state == DS_NODE_CONNECTING && n->ssh ? ds_ssh_deadline_ms(n->ssh) : -1;
}

void ds_node_keepalive(ds_node *n) {
    if (n->ssh && n->state != DS_NODE_CONNECTING && n->state != DS_NODE_DONE) {
        ds_ssh_keepalive(n->ssh);
        set_pending(n); /* libssh2 may have read what came meanwhile */
    }
}

void ds_node_free(ds_node *n) {
    n->wakes = NULL; /* (its loop is over) */
    ds_node_abandon(n, NULL);
    free(n->kill_cmd);
    n->kill_cmd = NULL;
    ds_buf_free(&n->to_agent);
    ds_buf_free(&n->from_agent);
    ds_buf_free(&n->err_line);
}
