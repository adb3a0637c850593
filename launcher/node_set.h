/* The controller loop's epoll set over its nodes' descriptors (docs/scale.md). The loop
 * polls three descriptors (signals, store events, this set's epoll fd) instead of three
 * per node; after the poll, ds_node_set_collect says which nodes' descriptors are ready,
 * so the kernel's work per pass is the ready nodes', not every node's. Each node's
 * registration follows what ds_node_pollfds asks for (libssh2 may want to write, a
 * local agent's stdin has bytes queued); ds_node_set_sync changes it only where that
 * changed. Data libssh2 already read stays the business of the node's pending flag
 * (ds_node_turn): epoll cannot see it. */
#ifndef DS_NODE_SET_H
#define DS_NODE_SET_H

#include "ds_err.h"
#include "node.h"

typedef struct ds_node_set ds_node_set;

/* For nodes[0..n): NULL with err when the epoll set cannot be made. */
ds_node_set *ds_node_set_new(ds_node *nodes, int n, ds_err *err);
void ds_node_set_free(ds_node_set *s);
/* Readable when a node's descriptor is ready (poll it with POLLIN). */
int ds_node_set_fd(const ds_node_set *s);
/* Brings every node's registration up to what it asks for now (system calls only where
 * that changed); before the poll. -1 with err when epoll refuses. */
int ds_node_set_sync(ds_node_set *s, ds_err *err);
/* After the poll: marks the nodes whose descriptors are ready (nothing when none is). */
void ds_node_set_collect(ds_node_set *s);
/* Was node i's descriptor ready at the last collect. */
int ds_node_set_ready(const ds_node_set *s, int i);

#endif
