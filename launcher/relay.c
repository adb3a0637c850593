/* `dslaunch --relay` (relay.h): one share of the nodes, served on stdin/stdout. It reads
 * CONFIG, RELAY_NODE and GO frames, starts its nodes' agents with the controller's own
 * code (node.c: fork/exec or SSH), then carries RELAY_IN / RELAY_EOF down to them and
 * their frames and stderr lines up. Its stdin's EOF (or a broken stdout, or TERM) is
 * the controller going away: every agent's stdin is closed. An agent told to stop (by
 * RELAY_EOF or so) that lingers past the grace period is killed, as the controller
 * kills one it reaches itself; the relay ends when every agent has. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "agent_proto.h"
#include "ds_clock.h"
#include "ds_signals.h"
#include "job.h"
#include "node.h"
#include "relay_opts.h"

typedef struct relay_agent {
    ds_node node;
    ds_plan_node where;  /* only host and node_rank: what node.c's messages need */
    char host[256];
    int index;           /* the node's index in the job */
    int ssh;             /* started over SSH (else fork/exec here) */
    ds_ssh_opts opts;    /* SSH: how to reach it, until started */
    char *command;       /* SSH: the remote command */
    int started, reported;
    long long kill_at_ms; /* told to stop: killed if still there then, dropped a little later (0: not told) */
} relay_agent;

typedef struct relay {
    relay_agent *agents;
    int nagents, cap;
    char dsrun[4096], job[192];
    int max_handshakes, grace_ms;
    ds_buf in, out;
    int in_eof, out_broken, go, stopping;
} relay;

static relay_agent *agent_of(relay *r, uint32_t index) {
    for (int i = 0; i < r->nagents; i++)
        if ((uint32_t)r->agents[i].index == index) return &r->agents[i];
    return NULL;
}

/* ---- up: what the controller hears ---- */

static void up(relay *r, int type, int index, const void *p, size_t len) {
    if (!r->out_broken) ds_frame_append(&r->out, type, (uint32_t)index, p, len);
}

/* A whole frame of an agent's, inside a RELAY_OUT frame. */
static void up_frame(relay *r, int index, const ds_frame *f) {
    if (r->out_broken) return;
    ds_buf_put_u8(&r->out, DS_FRAME_RELAY_OUT);
    ds_buf_put_u32(&r->out, (uint32_t)index);
    ds_buf_put_u32(&r->out, (uint32_t)(DS_FRAME_HEADER + f->len));
    ds_frame_append(&r->out, f->type, f->rank, f->payload, f->len);
}

static void on_frame(void *ctx, ds_node *n, const ds_frame *f) {
    relay *r = ctx;
    relay_agent *a = (relay_agent *)n;
    if (f->type == DS_FRAME_HELLO) { /* "pid\n..." */
        char pid[16];
        snprintf(pid, sizeof pid, "%.*s", (int)(f->len < 15 ? f->len : 15), (const char *)f->payload);
        n->agent_pid = atoi(pid);
    }
    if (f->type == DS_FRAME_BYE) n->bye = 1;
    up_frame(r, a->index, f);
}

static void on_line(void *ctx, ds_node *n, const char *line) {
    relay *r = ctx;
    up(r, DS_FRAME_RELAY_LINE, ((relay_agent *)n)->index, line, strlen(line));
}

/* The agent is gone: what went wrong, unless its own last words say it, then DONE. */
static void report_done(relay *r, relay_agent *a) {
    if (a->reported || a->node.state != DS_NODE_DONE) return;
    a->reported = 1;
    const char *e = a->node.error;
    if (a->node.failed && e[0] && strncmp(e, "the agent ended without saying goodbye", 38) != 0)
        up(r, DS_FRAME_RELAY_LINE, a->index, e, strlen(e));
    up(r, DS_FRAME_RELAY_DONE, a->index, NULL, 0);
}

/* ---- down: what the controller says ---- */

static int add_agent(relay *r, const ds_frame *f) {
    if (r->go || agent_of(r, f->rank)) return -1;
    if (r->nagents == r->cap) {
        int cap = r->cap ? 2 * r->cap : 64;
        relay_agent *a = realloc(r->agents, sizeof *a * (size_t)cap);
        if (!a) return -1;
        r->agents = a;
        r->cap = cap;
    }
    relay_agent *a = &r->agents[r->nagents];
    *a = (relay_agent){.index = (int)f->rank};
    a->node.local.in_fd = a->node.local.out_fd = a->node.local.err_fd = -1;
    if (f->len >= 3 && !memcmp(f->payload, "ssh", 3)) {
        ds_err err;
        a->ssh = 1;
        if (ds_relay_opts_get((const char *)f->payload, f->len, &a->opts, &a->command, &err) != 0) return -1;
    } else if (f->len != 5 || memcmp(f->payload, "local", 5)) {
        return -1;
    }
    r->nagents++;
    return 0;
}

static void config(relay *r, const ds_frame *f) {
    char kv[4200];
    snprintf(kv, sizeof kv, "%.*s", (int)(f->len < sizeof kv - 1 ? f->len : sizeof kv - 1), (const char *)f->payload);
    char *eq = strchr(kv, '=');
    if (!eq) return;
    *eq++ = 0;
    if (!strcmp(kv, "dsrun")) snprintf(r->dsrun, sizeof r->dsrun, "%s", eq);
    else if (!strcmp(kv, "job")) snprintf(r->job, sizeof r->job, "%s", eq);
    else if (!strcmp(kv, "max_handshakes")) r->max_handshakes = atoi(eq);
    else if (!strcmp(kv, "grace_ms")) r->grace_ms = atoi(eq);
}

/* Closes the agent's stdin (its dead-man switch) and sets when it is killed if it lingers. */
static void stop_agent(relay *r, relay_agent *a) {
    if (!a->started) {
        a->node.state = DS_NODE_DONE; /* never started: nothing to stop */
        a->started = 1;
        return;
    }
    ds_node_stop(&a->node);
    if (!a->kill_at_ms) a->kill_at_ms = ds_now_ms() + r->grace_ms + DS_STOP_SLACK_MS;
}

/* -1: the stream is not a relay's. */
static int down(relay *r) {
    ds_frame f;
    int p;
    while ((p = ds_frame_parse(&r->in, &f)) == 1) {
        relay_agent *a = agent_of(r, f.rank);
        switch (f.type) {
        case DS_FRAME_CONFIG: config(r, &f); break;
        case DS_FRAME_RELAY_NODE:
            if (add_agent(r, &f) != 0) return -1;
            break;
        case DS_FRAME_GO: r->go = 1; break;
        case DS_FRAME_RELAY_IN:
            if (!a) return -1;
            if (a->node.state != DS_NODE_DONE) ds_buf_put(&a->node.to_agent, f.payload, f.len);
            break;
        case DS_FRAME_RELAY_EOF:
            if (!a) return -1;
            stop_agent(r, a);
            break;
        default: return -1;
        }
        ds_buf_consume(&r->in, DS_FRAME_HEADER + f.len);
    }
    return p;
}

/* ---- starting the agents ---- */

static int in_flight(const relay *r) {
    int k = 0;
    for (int i = 0; i < r->nagents; i++) k += r->agents[i].node.state == DS_NODE_CONNECTING;
    return k;
}

static void start_agent(relay *r, relay_agent *a) {
    ds_err err = {""};
    char node[16];
    snprintf(node, sizeof node, "%d", a->index);
    a->started = 1;
    a->node.plan = &a->where;
    a->where.node_rank = a->index;
    snprintf(a->host, sizeof a->host, "%s", a->ssh && a->opts.name ? a->opts.name : "this node");
    a->where.host = a->host;
    int rc;
    if (a->ssh) {
        rc = ds_node_start_ssh(&a->node, &a->opts, a->command, &err);
    } else {
        char *argv[] = {r->dsrun, "agent", "--job", r->job, "--node", node, NULL};
        rc = ds_node_start_local(&a->node, argv, &err);
    }
    if (rc == 0) return;
    ds_node_abandon(&a->node, err.msg);
}

/* Local agents at once, SSH sessions up to max_handshakes opening at a time. */
static void start_agents(relay *r) {
    if (!r->go || r->stopping) return;
    int k = in_flight(r);
    for (int i = 0; i < r->nagents; i++) {
        relay_agent *a = &r->agents[i];
        if (a->started || (a->ssh && k >= r->max_handshakes)) continue;
        start_agent(r, a);
        k += a->node.state == DS_NODE_CONNECTING;
    }
}

/* ---- the end ---- */

static void begin_stop(relay *r) {
    if (r->stopping) return;
    r->stopping = 1;
    for (int i = 0; i < r->nagents; i++) stop_agent(r, &r->agents[i]);
}

static void past_deadlines(relay *r) {
    long long now = ds_now_ms();
    for (int i = 0; i < r->nagents; i++) {
        relay_agent *a = &r->agents[i];
        ds_node *n = &a->node;
        if (n->state == DS_NODE_DONE || !a->kill_at_ms || now < a->kill_at_ms) continue;
        if (now >= a->kill_at_ms + DS_DROP_AFTER_MS) {
            ds_node_abandon(n, "did not stop, even when killed; dropped");
        } else if (n->agent_pid > 0 || !n->via_ssh) {
            char cmd[64];
            snprintf(cmd, sizeof cmd, "kill -KILL -- %d", n->agent_pid);
            ds_node_kill_hard(n, cmd);
        }
    }
}

static int all_done(relay *r) {
    for (int i = 0; i < r->nagents; i++)
        if (r->agents[i].node.state != DS_NODE_DONE || !r->agents[i].reported) return 0;
    return 1;
}

/* ---- the loop ---- */

static void read_in(relay *r) {
    char buf[65536];
    ssize_t n = read(0, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) {
        r->in_eof = 1;
        begin_stop(r);
        return;
    }
    ds_buf_put(&r->in, buf, (size_t)n);
    if (down(r) < 0) {
        fprintf(stderr, "dslaunch --relay: malformed data on stdin (is dslaunch the same version on every node?)\n");
        r->in_eof = 1;
        begin_stop(r);
    }
}

static void write_out(relay *r) {
    while (ds_buf_unread(&r->out) && !r->out_broken) {
        ssize_t w = write(1, ds_buf_head(&r->out), ds_buf_unread(&r->out));
        if (w > 0) {
            ds_buf_consume(&r->out, (size_t)w);
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        } else {
            r->out_broken = 1; /* the controller is gone */
            ds_buf_clear(&r->out);
            begin_stop(r);
        }
    }
}

static int poll_timeout(const relay *r) {
    long long now = ds_now_ms(), wake = now + 1000;
    for (int i = 0; i < r->nagents; i++) {
        const ds_node *n = &r->agents[i].node;
        long long d = ds_node_deadline_ms(n);
        if (d >= 0 && d < wake) wake = d;
        if (n->pending && n->state != DS_NODE_DONE) wake = now;
    }
    for (int i = 0; i < r->nagents; i++) {
        const relay_agent *a = &r->agents[i];
        if (a->kill_at_ms && a->node.state != DS_NODE_DONE) {
            long long at = now >= a->kill_at_ms ? a->kill_at_ms + DS_DROP_AFTER_MS : a->kill_at_ms;
            if (at < wake) wake = at;
        }
    }
    return wake > now ? (int)(wake - now) : 0;
}

static void serve(relay *r, int sigfd) {
    ds_node_handler h = {.ctx = r, .frame = on_frame, .agent_line = on_line};
    struct pollfd *pf = NULL;
    int *at = NULL, *cnt = NULL; /* each agent's descriptors in pf */
    long long next_keepalive = 0;
    for (;;) {
        start_agents(r);
        for (int i = 0; i < r->nagents; i++) report_done(r, &r->agents[i]);
        write_out(r);
        if ((r->go || r->in_eof) && all_done(r) && (!ds_buf_unread(&r->out) || r->out_broken)) break;
        past_deadlines(r);
        /* A relay's share is ~sqrt(N) nodes: one poll over all of them per pass is cheap
         * (the controller's epoll set, node_set.h, is for the whole job's nodes). */
        struct pollfd *npf = realloc(pf, sizeof *pf * (size_t)(3 + 3 * r->nagents));
        if (npf) pf = npf;
        int *nat = realloc(at, sizeof *at * (size_t)(r->nagents + 1));
        if (nat) at = nat;
        int *ncnt = realloc(cnt, sizeof *cnt * (size_t)(r->nagents + 1));
        if (ncnt) cnt = ncnt;
        if (!npf || !nat || !ncnt) break;
        int k = 0;
        pf[k++] = (struct pollfd){.fd = sigfd, .events = POLLIN};
        pf[k++] = (struct pollfd){.fd = r->in_eof ? -1 : 0, .events = POLLIN};
        pf[k++] = (struct pollfd){.fd = ds_buf_unread(&r->out) && !r->out_broken ? 1 : -1, .events = POLLOUT};
        int polled = r->nagents; /* read_in may add agents after the poll */
        for (int i = 0; i < polled; i++) {
            ds_node *n = &r->agents[i].node;
            at[i] = k;
            k += cnt[i] = ds_node_pollfds(n, pf + k);
        }
        if (poll(pf, (nfds_t)k, poll_timeout(r)) < 0 && errno != EINTR) break;
        struct signalfd_siginfo si;
        while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            if (si.ssi_signo == SIGCHLD)
                for (int i = 0; i < r->nagents; i++) ds_node_reap(&r->agents[i].node);
            else begin_stop(r); /* TERM, INT, HUP: as if the controller had gone */
        }
        if (pf[1].revents) read_in(r);
        long long now = ds_now_ms();
        for (int i = 0; i < r->nagents; i++) {
            ds_node *n = &r->agents[i].node;
            int ready = 0;
            for (int j = 0; i < polled && j < cnt[i]; j++) ready |= pf[at[i] + j].revents != 0;
            if (ds_node_turn(n, ready, now)) ds_node_io(n, &h);
        }
        if (now >= next_keepalive) {
            for (int i = 0; i < r->nagents; i++) ds_node_keepalive(&r->agents[i].node);
            next_keepalive = now + 1000;
        }
    }
    free(pf);
    free(at);
    free(cnt);
}

int ds_relay_main(void) {
    relay r = {.max_handshakes = 64, .grace_ms = DS_STOP_GRACE_MS};
    ds_err err = {""};
    signal(SIGPIPE, SIG_IGN); /* a closed stdout is the controller gone: seen by write */
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, 0};
    int sigfd = ds_signals_fd(sigs, &err);
    if (sigfd < 0 || ds_ssh_global_init(&err) != 0) {
        fprintf(stderr, "dslaunch --relay: %s\n", err.msg);
        return 1;
    }
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    up(&r, DS_FRAME_HELLO, 0, pid, strlen(pid));
    serve(&r, sigfd);
    up(&r, DS_FRAME_BYE, 0, NULL, 0);
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
    if (!r.out_broken) ds_write_all(1, ds_buf_head(&r.out), ds_buf_unread(&r.out));
    for (int i = 0; i < r.nagents; i++) {
        ds_node_free(&r.agents[i].node);
        if (!r.agents[i].started) ds_ssh_opts_free(&r.agents[i].opts);
        free(r.agents[i].command);
    }
    free(r.agents);
    ds_buf_free(&r.in);
    ds_buf_free(&r.out);
    close(sigfd);
    return 0;
}
