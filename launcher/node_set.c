/* node_set.h: the nodes' descriptors in one epoll set. A node's descriptors are closed
 * by node.c (or srun.c) without telling this file, and the kernel then drops them from
 * the set itself; their numbers can come back for another node. So each registration is
 * also kept by descriptor number (who registered it last): a node takes one of its own
 * out only while the number is still its own. */
#include "node_set.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define SLOTS 3 /* descriptors of one node at most (ds_node_pollfds) */

typedef struct reg {
    int fd; /* -1: slot unused */
    uint32_t events;
} reg;

struct ds_node_set {
    int ep;
    ds_node *nodes;
    int n;
    reg *regs;          /* SLOTS per node: what the kernel was told */
    int *owner;         /* by descriptor number: 1 + the node that registered it, 0 none */
    int nowner;
    uint64_t *seen;     /* by node: the collect that found it ready */
    uint64_t pass;
    struct epoll_event evs[256];
};

ds_node_set *ds_node_set_new(ds_node *nodes, int n, ds_err *err) {
    ds_node_set *s = calloc(1, sizeof *s);
    if (!s) return ds_err_set(err, "out of memory"), NULL;
    s->nodes = nodes;
    s->n = n;
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    s->regs = malloc((size_t)(n > 0 ? n : 1) * SLOTS * sizeof *s->regs);
    s->seen = calloc((size_t)(n > 0 ? n : 1), sizeof *s->seen);
    if (s->ep < 0 || !s->regs || !s->seen) {
        ds_err_errno(err, s->ep < 0 ? errno : ENOMEM, "the controller's epoll set");
        ds_node_set_free(s);
        return NULL;
    }
    for (int i = 0; i < n * SLOTS; i++) s->regs[i].fd = -1;
    s->pass = 1;
    return s;
}

void ds_node_set_free(ds_node_set *s) {
    if (!s) return;
    if (s->ep >= 0) close(s->ep);
    free(s->regs);
    free(s->owner);
    free(s->seen);
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

int ds_node_set_sync(ds_node_set *s, ds_err *err) {
    for (int i = 0; i < s->n; i++)
        if (sync_node(s, i, err) != 0) return -1;
    return 0;
}

void ds_node_set_collect(ds_node_set *s) {
    s->pass++;
    int cap = (int)(sizeof s->evs / sizeof s->evs[0]);
    /* Ready descriptors stay ready (level-triggered) and come round again at the end of
     * the kernel's list: as many rounds as it takes to have seen every node once. */
    for (int round = 0; round <= s->n / cap; round++) {
        int got = epoll_wait(s->ep, s->evs, cap, 0);
        for (int k = 0; k < got; k++)
            if (s->evs[k].data.u32 < (uint32_t)s->n) s->seen[s->evs[k].data.u32] = s->pass;
        if (got < cap) break;
    }
}

int ds_node_set_ready(const ds_node_set *s, int i) { return s->seen[i] == s->pass; }
