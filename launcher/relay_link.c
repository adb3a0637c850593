/* The thread that serves the relays (relay.h): one poll loop over every relay's link
 * (node.c drives it: pipes to a local relay, or an SSH channel) and, for each relayed
 * node, the three pipes the controller's loop sees as that node's agent. Bytes the
 * controller writes for an agent go up its relay's link in RELAY_IN frames; what the
 * relay sends for a node comes out of that node's pipes. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_clock.h"
#include "job.h"
#include "relay_set.h"

#define BUFFERED (1u << 20) /* per relay: read no more from its nodes' pipes until it drains */

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

void ds_relay_end_node(relayed_node *rn, const char *why) {
    if (rn->done) return;
    if (why && rn->err_w >= 0) {
        /* a whole line, after whatever of the agent's is still queued */
        char line[1600];
        int n = snprintf(line, sizeof line, "%s\n", why);
        ds_buf_put(&rn->to_err, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        while (ds_buf_unread(&rn->to_err)) {
            ssize_t w = write(rn->err_w, ds_buf_head(&rn->to_err), ds_buf_unread(&rn->to_err));
            if (w <= 0) break;
            ds_buf_consume(&rn->to_err, (size_t)w);
        }
    }
    close_fd(&rn->in_r);
    close_fd(&rn->out_w);
    close_fd(&rn->err_w);
    ds_buf_free(&rn->to_out);
    ds_buf_free(&rn->to_err);
    rn->ended = rn->done = 1;
}

/* ---- what a relay says ---- */

static relayed_node *node_of(ds_relay_set *set, const relay_link *l, uint32_t index) {
    for (int k = l->first; k < l->first + l->count; k++)
        if ((uint32_t)set->nodes[k].index == index) return &set->nodes[k];
    return NULL;
}

static void on_frame(void *ctx, ds_node *n, const ds_frame *f) {
    ds_relay_set *set = ctx;
    relay_link *l = (relay_link *)n;
    if (f->type == DS_FRAME_HELLO) {
        char pid[16];
        snprintf(pid, sizeof pid, "%.*s", (int)(f->len < 15 ? f->len : 15), (const char *)f->payload);
        l->relay_pid = atoi(pid);
        n->state = DS_NODE_RUNNING;
        return;
    }
    if (f->type == DS_FRAME_BYE) {
        n->bye = 1;
        return;
    }
    relayed_node *rn = node_of(set, l, f->rank);
    if (!rn || rn->done) return; /* (a node the controller gave up on) */
    if (f->type == DS_FRAME_RELAY_OUT) {
        ds_buf_put(&rn->to_out, f->payload, f->len);
    } else if (f->type == DS_FRAME_RELAY_LINE) {
        ds_buf_put(&rn->to_err, f->payload, f->len);
        ds_buf_put(&rn->to_err, "\n", 1);
    } else if (f->type == DS_FRAME_RELAY_DONE) {
        rn->ended = 1;
    }
}

static void on_line(void *ctx, ds_node *n, const char *line) {
    (void)ctx, (void)n, (void)line; /* node.c keeps the last one: the relay's last words */
}

/* The relay is gone: every node of its share still running ends, and says why. */
static void relay_lost(ds_relay_set *set, relay_link *l) {
    if (l->lost_told || l->node.state != DS_NODE_DONE) return;
    l->lost_told = 1;
    const char *e = l->node.error;
    char why[1500];
    int a = set->nodes[l->first].index, z = set->nodes[l->first + l->count - 1].index;
    if (!l->relay_pid) { /* it never said hello: it did not start (an SSH error, a missing dslaunch) */
        snprintf(why, sizeof why, "its relay (dslaunch --relay on %s, for nodes %d-%d) did not start: %s", l->where.host,
                 a, z, e[0] ? e : "it ended at once");
    } else {
        int agent_words = !strncmp(e, "the agent ", 10);
        snprintf(why, sizeof why, "lost with its relay (dslaunch --relay on %s, pid %d, for nodes %d-%d): %s%s",
                 l->where.host, l->relay_pid, a, z, agent_words ? "the relay " : "",
                 !e[0] ? "it ended before its nodes" : agent_words ? e + 10 : e);
    }
    for (int k = l->first; k < l->first + l->count; k++) {
        relayed_node *rn = &set->nodes[k];
        if (!rn->ended) ds_relay_end_node(rn, why);
    }
}

/* ---- a node's bytes ---- */

/* The controller's bytes for the agent, up the relay's link. */
static void read_in(ds_relay_set *set, relayed_node *rn) {
    ds_node *link = &set->links[rn->link].node;
    char buf[65536];
    ssize_t n = read(rn->in_r, buf, sizeof buf);
    if (n > 0) {
        ds_frame_append(&link->to_agent, DS_FRAME_RELAY_IN, (uint32_t)rn->index, buf, (size_t)n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        ds_frame_append(&link->to_agent, DS_FRAME_RELAY_EOF, (uint32_t)rn->index, NULL, 0);
        close_fd(&rn->in_r); /* the controller stops the node: so does its agent */
    }
}

/* 0 when all went, 1 when the pipe is full, -1 when the controller closed it. */
static int drain(int fd, ds_buf *b) {
    while (ds_buf_unread(b)) {
        ssize_t w = write(fd, ds_buf_head(b), ds_buf_unread(b));
        if (w > 0) ds_buf_consume(b, (size_t)w);
        else if (w < 0 && (errno == EAGAIN || errno == EINTR)) return 1;
        else return -1;
    }
    return 0;
}

/* What the relay sent for the agent, out of the controller's pipes; the node ends once
 * its agent is gone and all it said is passed on. */
static void write_out(ds_relay_set *set, relayed_node *rn) {
    int o = drain(rn->out_w, &rn->to_out), e = o < 0 ? -1 : drain(rn->err_w, &rn->to_err);
    if (o < 0 || e < 0) { /* the controller gave the node up */
        if (rn->in_r >= 0)
            ds_frame_append(&set->links[rn->link].node.to_agent, DS_FRAME_RELAY_EOF, (uint32_t)rn->index, NULL, 0);
        ds_relay_end_node(rn, NULL);
        return;
    }
    if (rn->ended && !o && !e) ds_relay_end_node(rn, NULL);
}

/* ---- the loop ---- */

typedef struct slots {
    struct pollfd *pf;
    int n, cap;
} slots;

static int add(slots *s, int fd, short events) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        struct pollfd *pf = realloc(s->pf, sizeof *pf * (size_t)cap);
        if (!pf) return -1;
        s->pf = pf;
        s->cap = cap;
    }
    s->pf[s->n] = (struct pollfd){.fd = fd, .events = events};
    return s->n++;
}

/* Per relayed node, where its pipes are in the poll set (-1: not there). */
typedef struct at {
    int in, out, err;
} at;

static int fill(ds_relay_set *set, slots *s, at *where) {
    s->n = 0;
    add(s, set->wake[0], POLLIN);
    for (int r = 0; r < set->nlinks; r++) {
        relay_link *l = &set->links[r];
        if (l->pidfd >= 0 && !l->node.reaped && !l->node.via_ssh) add(s, l->pidfd, POLLIN);
        struct pollfd three[3];
        int k = ds_node_pollfds(&l->node, three);
        l->pf_at = s->n;
        l->pf_n = k;
        for (int j = 0; j < k; j++)
            if (add(s, three[j].fd, three[j].events) < 0) return -1;
    }
    for (int k = 0; k < set->nnodes; k++) {
        relayed_node *rn = &set->nodes[k];
        where[k] = (at){-1, -1, -1};
        if (rn->done) continue;
        int room = ds_buf_unread(&set->links[rn->link].node.to_agent) < BUFFERED;
        if (rn->in_r >= 0 && room) where[k].in = add(s, rn->in_r, POLLIN);
        /* always there, so the controller's closing (POLLERR) is seen */
        where[k].out = add(s, rn->out_w, ds_buf_unread(&rn->to_out) ? POLLOUT : 0);
        where[k].err = add(s, rn->err_w, ds_buf_unread(&rn->to_err) ? POLLOUT : 0);
        if (where[k].err < 0) return -1;
    }
    return 0;
}

static int timeout(const ds_relay_set *set, long long end_by) {
    long long now = ds_now_ms(), wake = now + 1000;
    for (int r = 0; r < set->nlinks; r++) {
        const ds_node *n = &set->links[r].node;
        long long d = ds_node_deadline_ms(n);
        if (d >= 0 && d < wake) wake = d;
        /* (what is queued for a relay whose SSH session is still opening waits for its socket) */
        int queued = ds_buf_unread(&n->to_agent) && !n->stdin_closed && n->state != DS_NODE_CONNECTING;
        if (n->state != DS_NODE_DONE && (n->pending || queued)) wake = now;
    }
    if (set->stopping && end_by < wake) wake = end_by;
    return wake > now ? (int)(wake - now) : 0;
}

static int links_done(const ds_relay_set *set) {
    for (int r = 0; r < set->nlinks; r++)
        if (set->links[r].node.state != DS_NODE_DONE) return 0;
    return 1;
}

/* A relay whose nodes are all done is told to end (its stdin closed). */
static void stop_idle_links(ds_relay_set *set) {
    for (int r = 0; r < set->nlinks; r++) {
        relay_link *l = &set->links[r];
        int busy = 0;
        for (int k = l->first; k < l->first + l->count && !busy; k++) busy = !set->nodes[k].done;
        if ((!busy || set->stopping) && !l->node.close_stdin && l->node.state != DS_NODE_DONE) ds_node_stop(&l->node);
    }
}

void *ds_relay_serve(void *arg) {
    ds_relay_set *set = arg;
    pthread_setname_np(pthread_self(), "ds-relay"); /* (bench/scale tells its CPU time apart) */
    ds_node_handler h = {.ctx = set, .frame = on_frame, .agent_line = on_line};
    slots s = {0};
    at *where = calloc((size_t)set->nnodes + 1, sizeof *where);
    long long end_by = 0, next_tick = 0;
    while (where) {
        for (int r = 0; r < set->nlinks; r++) relay_lost(set, &set->links[r]);
        stop_idle_links(set);
        if (set->stopping && (links_done(set) || ds_now_ms() >= end_by)) break;
        if (fill(set, &s, where) != 0) break;
        if (poll(s.pf, (nfds_t)s.n, timeout(set, end_by)) < 0 && errno != EINTR) break;
        if (s.pf[0].revents && !set->stopping) {
            set->stopping = 1;
            /* relays kill what lingers after grace + slack, and drop it after that */
            end_by = ds_now_ms() + set->grace_ms + DS_STOP_SLACK_MS + DS_DROP_AFTER_MS + 1000;
        }
        for (int k = 0; k < set->nnodes; k++)
            if (where[k].in >= 0 && s.pf[where[k].in].revents) read_in(set, &set->nodes[k]);
        long long now = ds_now_ms();
        int tick = now >= next_tick;
        for (int r = 0; r < set->nlinks; r++) {
            ds_node *n = &set->links[r].node;
            ds_node_reap(n); /* a local relay (its pidfd woke the poll) */
            if (tick) ds_node_keepalive(n);
            const relay_link *l = &set->links[r];
            int ready = 0;
            for (int j = 0; j < l->pf_n; j++) ready |= s.pf[l->pf_at + j].revents != 0;
            if (ds_node_turn(n, ready, now) || tick) ds_node_io(n, &h);
        }
        if (tick) next_tick = now + 1000;
        for (int k = 0; k < set->nnodes; k++)
            if (!set->nodes[k].done) write_out(set, &set->nodes[k]);
    }
    free(s.pf);
    free(where);
    return NULL;
}
