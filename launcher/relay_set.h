/* The controller's relays for one attempt (relay.h), shared by their setup and teardown
 * (relay_set.c, the controller's thread) and the thread that serves them (relay_link.c).
 * After launch only the serving thread touches it, except the wake pipe that asks the
 * thread to end. */
#ifndef DS_RELAY_SET_H
#define DS_RELAY_SET_H

#include <pthread.h>

#include "ds_buf.h"
#include "node.h"

/* One relayed node as the thread sees it. The controller holds the pipes' other ends. */
typedef struct relayed_node {
    int index;          /* the node's index in the job */
    int link;           /* its relay */
    int in_r;           /* the controller's bytes for the agent (read end), -1 once closed */
    int out_w, err_w;   /* the agent's frames and stderr lines for the controller (write ends) */
    ds_buf to_out, to_err; /* not yet written to out_w / err_w */
    int ended;          /* the relay said DONE (or was lost): close once all is passed on */
    int done;           /* every descriptor closed: the controller sees its agent gone */
} relayed_node;

/* One relay: a `dslaunch --relay` process, reached like an agent (node.c). */
typedef struct relay_link {
    ds_node node;
    ds_plan_node where;  /* a copy of its host's plan node (not owned) */
    int first, count;    /* its nodes: set->nodes[first .. first + count) */
    int pidfd;           /* a local relay's: readable when it exits, else -1 */
    int relay_pid;       /* from its HELLO */
    int lost_told;       /* its nodes were ended because it was lost */
    int pf_at, pf_n;     /* its session's descriptors in the serving thread's poll set */
} relay_link;

typedef struct ds_relay_set {
    relayed_node *nodes;
    int nnodes, fanout;
    relay_link *links;
    int nlinks;
    int wake[2];         /* the controller writes a byte: end the relays */
    int stopping;
    int grace_ms;        /* how long relays may take to end once their stdin closed */
    pthread_t thread;
    int thread_started;
} ds_relay_set;

/* The serving thread (relay_link.c). */
void *ds_relay_serve(void *set);
/* Ends relayed node rn with why as its agent's last words: the controller sees it gone. */
void ds_relay_end_node(relayed_node *rn, const char *why);

#endif
