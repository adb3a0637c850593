/* The store server's insides, shared by its files and by nothing else:
 *   store_server.c    connections, the epoll loop, events and heartbeats, the public API
 *   store_requests.c  what each request does (store_proto.h)
 *   store_waiters.c   requests that wait for keys: the index from key to waiters,
 *                     deadlines, cancelling
 * One thread serves everything; s->lock guards only what other threads also touch (the
 * map, heartbeats, events, counters). */
#ifndef DS_STORE_SERVER_IMPL_H
#define DS_STORE_SERVER_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "ds_buf.h"
#include "store_map.h"
#include "store_proto.h"
#include "store_server.h"

typedef struct client client;
typedef struct waiter waiter;

/* A GET or WAIT that found its keys missing: a copy of the request, registered on the
 * one key it misses first (an index from key to waiters), answered when that key is set
 * or its deadline passes. An untagged waiter holds its connection (the client is
 * blocked, as the protocol is one request at a time); tagged ones do not. */
struct waiter {
    client *c;
    int tagged;
    uint32_t tag;
    uint8_t op;
    uint8_t *body;        /* the request's body, after its op byte */
    uint32_t blen;
    int64_t deadline_ms;  /* -1: forever */
    struct waitlist *wl;  /* the key's list it is on, or NULL */
    waiter *kprev, *knext;  /* on that key's list */
    waiter *cprev, *cnext;  /* on its client's list */
    waiter *rprev, *rnext;  /* on the server's ready list */
    int ready;
};

/* Waiters on one key; the value of an entry of s->waiting. */
typedef struct waitlist {
    waiter *first;
    const char *key; /* its entry's key */
    size_t klen;
} waitlist;

struct client {
    int fd;
    uint64_t id;
    char peer[64];
    int authed;
    int node_rank;        /* -1 until its first heartbeat */
    int64_t connected_ms;
    int blocked;          /* an untagged waiter holds the connection */
    int refused;          /* over the limit: its AUTH is answered ERROR, then it is closed */
    int closing;          /* close once out is sent (after an ERROR to AUTH) */
    char closing_why[200];
    int dead;
    uint32_t ev_mask;     /* what epoll watches for it now */
    waiter *waiters;      /* its requests waiting for keys */
    ds_buf in, out;
};

struct ds_store_server {
    int listen_fd, wake_fd, event_fd, epoll_fd, port;
    int auth_timeout_ms;  /* a connection that has not sent AUTH by then is dropped */
    int max_clients;      /* beyond: refused with a message (store_server.c) */
    char token[DS_STORE_TOKEN_LEN];
    pthread_t thread;
    atomic_int stop;
    atomic_int changed;   /* a key was set by the controller: every waiter looks again */
    atomic_int nwaiting;  /* waiters */
    atomic_ullong nops[DS_STORE_NOPS]; /* requests served, by op (a TAGGED frame counts as its inner op) */
    pthread_mutex_t lock; /* map, heartbeats, events, nauthed */

    ds_store_map map;
    ds_store_map waiting; /* key -> waitlist (values are waitlist structs) */
    ds_store_map barriers; /* name -> a BARRIER's arrivals (store_barriers.c) */
    waiter *ready;        /* waiters whose key was set: to evaluate again */
    int64_t next_due_ms;  /* the earliest deadline (waiter or AUTH) may be due; -1 none */

    client **clients;
    int nclients, cap_clients, nauthed;
    int ndead;            /* dropped, not yet reaped */
    uint64_t next_id;
    int64_t listen_pause_until;

    int64_t *hb_ms;        /* per node rank, -1 never */
    uint64_t *hb_owner;    /* client id whose loss means NODE_LOST */
    int nhb;

    ds_store_event *events; /* ring */
    int ev_head, ev_count, ev_cap;
    uint64_t ev_dropped;
};

enum { DONE, BLOCKED, REJECT };

typedef struct request {
    ds_store_server *s;
    client *c;
    ds_reader body;     /* what is left to parse */
    ds_reader whole;    /* the whole body: what a waiter keeps */
    uint8_t op;
    int tagged;
    uint32_t tag;
    waiter *w;          /* evaluating a waiter again, else NULL */
    char why[200];      /* REJECT: the reason */
} request;

/* Counts one request of op off the wire (not a waiter's evaluation again). */
static inline void ds_store_count(ds_store_server *s, uint8_t op) {
    atomic_fetch_add_explicit(&s->nops[op < DS_STORE_NOPS ? op : 0], 1, memory_order_relaxed);
}

/* store_requests.c: serves one request (q->op); DONE, BLOCKED (a waiter holds it) or
 * REJECT (q->why). Replies go to q->c->out. */
int ds_store_dispatch(request *q);
/* Appends the answer (status, then a and b) to q's client's output, tagged as q was. */
int ds_store_reply(request *q, uint8_t status, const void *a, size_t alen, const void *b, size_t blen);

/* store_barriers.c: a BARRIER request; and a BARRIER waiter w is going away. */
int ds_store_do_barrier(request *q);
void ds_store_barrier_left(ds_store_server *s, const waiter *w);

/* store_waiters.c */
/* Makes q a waiter on key (or checks the deadline of the one it is); BLOCKED, or DONE
 * with a TIMEOUT answer, or REJECT when out of memory. */
int ds_store_wait_on(request *q, int32_t timeout_ms, const uint8_t *key, size_t klen);
/* Key was set: its waiters go to the ready list. */
void ds_store_key_set(ds_store_server *s, const uint8_t *key, size_t klen);
/* Evaluates every ready waiter again (and, after a set by the controller, all). */
void ds_store_run_ready(ds_store_server *s);
/* c's waiters whose deadline passed go to the ready list (to be answered TIMEOUT); *next
 * gets the earliest deadline still ahead (unchanged if none is earlier). */
void ds_store_expire(ds_store_server *s, client *c, int64_t now, int64_t *next);
/* Drops the tag's waiter of c (a CANCEL); 0 when there was none. */
int ds_store_cancel(ds_store_server *s, client *c, uint32_t tag);
/* Frees every waiter of c (it is going away). */
void ds_store_drop_waiters(ds_store_server *s, client *c);
void ds_store_waiter_free(ds_store_server *s, waiter *w);

/* store_server.c, for the others */
void ds_store_client_drop(ds_store_server *s, client *c, const char *reason);
/* Sends what it can of c->out and serves what the client sent, until neither moves. */
void ds_store_pump(ds_store_server *s, client *c);
/* (Heartbeats) callers hold s->lock. */
void ds_store_event_push(ds_store_server *s, ds_store_event_kind kind, int node_rank, const char *peer,
                         const char *reason);
int ds_store_heartbeat_fit(ds_store_server *s, int node);

#endif
