/* node_set.h: the nodes' descriptors in one epoll set. A node's descriptors are closed
 * by node.c (or srun.c) without telling this file, and the kernel then drops them from
 * the set itself; their numbers can come back for another node. So each registration is
 * also kept by descriptor number (who registered it last): a node takes one of its own
 * out only while the number is still its own. Timers sit in a heap and are checked when
 * they come out: a node's deadline or keepalive that changed since leaves a stale entry
 * behind, which is dropped then (timer_heap.h). */
#include "node_set.h"
#include "timer_heap.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define SLOTS 3 /* descriptors of one node at most (ds_node_pollfds) */
#define KEEPALIVE_MS 1000

typedef struct reg {
    int fd; /* -1: slot unused */
    uint32_t events;
} reg;

enum { T_DEADLINE, T_KEEPALIVE, T_ALARM };
enum { SEEN_DONE = 1, SEEN_CONNECTING = 2 };


struct ds_node_set {
    int ep;
    ds_node *nodes;
    int n;
    ds_node_wakes *wakes;
    reg *regs;          /* SLOTS per node: what the kernel was told */
    int *owner;         /* by descriptor number: 1 + the node that registered it, 0 none */
    int nowner;
    uint64_t *ready;    /* by node: the pass whose poll found it ready */
    uint64_t *gathered; /* by node: the pass that put it in turn[] */
    uint64_t pass;
    int *turn, nturn;   /* this pass's nodes */
    unsigned char *seen; /* by node: SEEN_* as last counted */
    int live, connecting;
    long long *deadline, *keepalive, *alarm; /* by node: its timers in the heaps (0: none) */
    ds_timer_heap timers, alarms; /* (alarms are the loop's: not in the timeout) */
    struct epoll_event evs[256];
};

/* Counts node i's state in live and connecting as it is now. */
static void count(ds_node_set *s, int i) {
    ds_node_state st = s->nodes[i].state;
    unsigned char now = (st == DS_NODE_DONE ? SEEN_DONE : 0) | (st == DS_NODE_CONNECTING ? SEEN_CONNECTING : 0);
    unsigned char was = s->seen[i];
    if ((was ^ now) & SEEN_DONE) s->live += now & SEEN_DONE ? -1 : 1;
    if ((was ^ now) & SEEN_CONNECTING) s->connecting += now & SEEN_CONNECTING ? 1 : -1;
    s->seen[i] = now;
}

ds_node_set *ds_node_set_new(ds_node *nodes, int n, ds_node_wakes *wakes, ds_err *err) {
    ds_node_set *s = calloc(1, sizeof *s);
    if (!s) return ds_err_set(err, "out of memory"), NULL;
    size_t m = (size_t)(n > 0 ? n : 1);
    s->nodes = nodes;
    s->n = n;
    s->wakes = wakes;
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    s->regs = malloc(m * SLOTS * sizeof *s->regs);
    s->ready = calloc(m, sizeof *s->ready);
    s->gathered = calloc(m, sizeof *s->gathered);
    s->turn = calloc(m, sizeof *s->turn);
    s->seen = calloc(m, sizeof *s->seen);
    s->deadline = calloc(m, sizeof *s->deadline);
    s->keepalive = calloc(m, sizeof *s->keepalive);
    s->alarm = calloc(m, sizeof *s->alarm);
    if (s->ep < 0 || !s->regs || !s->ready || !s->gathered || !s->turn || !s->seen || !s->deadline || !s->keepalive ||
        !s->alarm) {
        ds_err_errno(err, s->ep < 0 ? errno : ENOMEM, "the controller's epoll set");
        ds_node_set_free(s);
        return NULL;
    }
    for (int i = 0; i < n * SLOTS; i++) s->regs[i].fd = -1;
    s->live = n; /* (seen[] says: not done, not connecting) */
    for (int i = 0; i < n; i++) count(s, i);
    s->pass = 1;
    return s;
}

void ds_node_set_free(ds_node_set *s) {
    if (!s) return;
    if (s->ep >= 0) close(s->ep);
    free(s->regs);
    free(s->owner);
    free(s->ready);
    free(s->gathered);
    free(s->turn);
    free(s->seen);
    free(s->deadline);
    free(s->keepalive);
    free(s->alarm);
    ds_timer_heap_free(&s->timers);
    ds_timer_heap_free(&s->alarms);
    free(s);
}

int ds_node_set_fd(const ds_node_set *s) { return s->ep; }

static int own(ds_node_set *s, int fd, int who) {
    if (fd >= s->nowner) {
        int cap = fd + 1 > 2 * s->nowner ? fd + 1 : 2 * s->nowner;
        int *o = realloc(s->owner, (size_t)cap * sizeof *o);
        if (!o) return -1;
        memset(o + s->nowner, 0, (size_t)(cap - s->nowner) * sizeof *o);
        s->owner = o;
        s->nowner = cap;
    }
    s->owner[fd] = who;
    return 0;
}

static uint32_t epoll_events(short ev) {
    return (ev & POLLIN ? EPOLLIN : 0u) | (ev & POLLOUT ? EPOLLOUT : 0u);
}

/* Tells the kernel fd's events for node i: added, or changed when it has it. */
static int put(ds_node_set *s, int i, int fd, uint32_t events, int known) {
    struct epoll_event ev = {.events = events, .data.u32 = (uint32_t)i};
    int rc = epoll_ctl(s->ep, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    if (rc != 0 && errno == (known ? ENOENT : EEXIST))
        rc = epoll_ctl(s->ep, known ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
    return rc == 0 ? own(s, fd, i + 1) : -1;
}

static int sync_node(ds_node_set *s, int i, ds_err *err) {
    struct pollfd want[SLOTS];
    int k = ds_node_pollfds(&s->nodes[i], want);
    reg *r = s->regs + (size_t)i * SLOTS;
    for (int j = 0; j < SLOTS; j++) { /* registered, no longer wanted */
        int wanted = 0;
        for (int w = 0; w < k && !wanted; w++) wanted = want[w].fd == r[j].fd;
        if (r[j].fd < 0 || wanted) continue;
        if (r[j].fd < s->nowner && s->owner[r[j].fd] == i + 1) {
            epoll_ctl(s->ep, EPOLL_CTL_DEL, r[j].fd, NULL); /* fails when it was closed: gone already */
            s->owner[r[j].fd] = 0;
        }
        r[j].fd = -1;
    }
    for (int w = 0; w < k; w++) {
        uint32_t events = epoll_events(want[w].events);
        int j = 0, free_slot = -1;
        while (j < SLOTS && r[j].fd != want[w].fd) {
            if (r[j].fd < 0 && free_slot < 0) free_slot = j;
            j++;
        }
        int known = j < SLOTS && want[w].fd < s->nowner && s->owner[want[w].fd] == i + 1;
        if (known && r[j].events == events) continue;
        if (j == SLOTS) j = free_slot;
        if (j < 0 || put(s, i, want[w].fd, events, known) != 0)
            return ds_err_errno(err, j < 0 ? EINVAL : errno, "epoll: node %d's descriptor %d", i, want[w].fd);
        r[j] = (reg){.fd = want[w].fd, .events = events};
    }
    return 0;
}

/* ---- timers ---- */

static int current(const ds_node_set *s, ds_timer t) {
    const long long *at = t.kind == T_DEADLINE ? s->deadline : t.kind == T_KEEPALIVE ? s->keepalive : s->alarm;
    return at[t.node] == t.at;
}

/* h's earliest timer still current, stale ones dropped; NULL when none. */
static const ds_timer *earliest(const ds_node_set *s, ds_timer_heap *h) {
    const ds_timer *t;
    while ((t = ds_timer_heap_top(h)) && !current(s, *t)) ds_timer_heap_pop(h);
    return t;
}

/* Sets node i's timer of kind to at (its slot: *slot); 0 cancels. */
static void set_timer(ds_timer_heap *h, long long *slot, int i, long long at, int kind) {
    /* (out of memory: no timer rather than a stale one) */
    *slot = at && ds_timer_heap_push(h, (ds_timer){.at = at, .node = i, .kind = kind}) != 0 ? 0 : at;
}

void ds_node_set_alarm(ds_node_set *s, int i, long long at_ms) {
    set_timer(&s->alarms, &s->alarm[i], i, at_ms, T_ALARM);
}

int ds_node_set_alarm_due(ds_node_set *s, long long now_ms) {
    const ds_timer *t = earliest(s, &s->alarms);
    if (!t || t->at > now_ms) return -1;
    int i = ds_timer_heap_pop(&s->alarms).node;
    s->alarm[i] = 0;
    return i;
}

/* ---- passes ---- */

int ds_node_set_live(const ds_node_set *s) { return s->live; }
int ds_node_set_connecting(const ds_node_set *s) { return s->connecting; }

int ds_node_set_timeout(ds_node_set *s, long long now_ms) {
    if (s->wakes->head) return 0;
    const ds_timer *t = earliest(s, &s->timers);
    if (!t) return -1;
    return t->at <= now_ms ? 0 : t->at - now_ms > INT_MAX ? INT_MAX : (int)(t->at - now_ms);
}

static void gather(ds_node_set *s, int i) {
    if (s->gathered[i] == s->pass) return;
    s->gathered[i] = s->pass;
    s->turn[s->nturn++] = i;
}

int ds_node_set_gather(ds_node_set *s, int polled, long long now_ms) {
    s->pass++;
    s->nturn = 0;
    int cap = (int)(sizeof s->evs / sizeof s->evs[0]);
    /* Ready descriptors stay ready (level-triggered) and come round again at the end of
     * the kernel's list: as many rounds as it takes to have seen every ready node once. */
    for (int round = 0; polled && round <= s->n / cap; round++) {
        int got = epoll_wait(s->ep, s->evs, cap, 0);
        for (int k = 0; k < got; k++) {
            uint32_t i = s->evs[k].data.u32;
            if (i >= (uint32_t)s->n) continue;
            s->ready[i] = s->pass;
            gather(s, (int)i);
        }
        if (got < cap) break;
    }
    const ds_timer *t;
    while ((t = earliest(s, &s->timers)) && t->at <= now_ms) {
        ds_timer due = ds_timer_heap_pop(&s->timers);
        if (due.kind == T_KEEPALIVE) { /* (it wakes the node: libssh2 may read meanwhile) */
            set_timer(&s->timers, &s->keepalive[due.node], due.node, now_ms + KEEPALIVE_MS, T_KEEPALIVE);
            ds_node_keepalive(&s->nodes[due.node]);
        }
        gather(s, due.node); /* a deadline stays set: the opening fails at its turn */
    }
    for (ds_node *n = s->wakes->head, *next; n; n = next) {
        next = n->wake_next;
        n->woken = 0;
        n->wake_next = NULL;
        gather(s, (int)(n - s->nodes));
    }
    s->wakes->head = NULL;
    return s->nturn;
}

int ds_node_set_nth(const ds_node_set *s, int k, int *ready) {
    int i = s->turn[k];
    *ready = s->ready[i] == s->pass;
    return i;
}

int ds_node_set_update(ds_node_set *s, int i, long long now_ms, ds_err *err) {
    const ds_node *n = &s->nodes[i];
    if (sync_node(s, i, err) != 0) return -1;
    count(s, i);
    long long d = ds_node_deadline_ms(n);
    if (d < 0) s->deadline[i] = 0;
    else if (d != s->deadline[i]) set_timer(&s->timers, &s->deadline[i], i, d, T_DEADLINE);
    int open_ssh = n->ssh && (n->state == DS_NODE_STARTED || n->state == DS_NODE_RUNNING);
    if (!open_ssh) s->keepalive[i] = 0;
    else if (!s->keepalive[i]) set_timer(&s->timers, &s->keepalive[i], i, now_ms + KEEPALIVE_MS, T_KEEPALIVE);
    return 0;
}
