/* The controller loop's schedule of its nodes (docs/scale.md): which nodes get a turn
 * this pass, found without looking at the others, so a pass costs the nodes that have
 * something to do, not every node.
 *   - Their descriptors are in one epoll set: the loop polls three descriptors (signals,
 *     store events, this set's epoll fd) instead of three per node, and the kernel
 *     reports only the ready ones. A node's registration follows what ds_node_pollfds
 *     asks for; it can change only during the node's turn or by something that wakes it,
 *     so it is brought up to date then (ds_node_set_update), never by a walk.
 *   - The nodes' wakes list (node.h): work no descriptor announces (a stop, a kill to
 *     send, data libssh2 holds, a reaped agent, a start, an end).
 *   - Timers in a min-heap: each opening's deadline, and each open SSH session's
 *     keepalive (once a second; libssh2 sends one when its interval is due); and the
 *     loop's alarms for its own checks (when a node's heartbeat would be too old).
 *   - The live and connecting counts, kept as nodes change, not recounted. */
#ifndef DS_NODE_SET_H
#define DS_NODE_SET_H

#include "ds_err.h"
#include "node.h"

typedef struct ds_node_set ds_node_set;

/* For nodes[0..n), whose wakes pointer is wakes: NULL with err when the epoll set cannot
 * be made. The nodes started before (on wakes' list) get their turn in the first pass. */
ds_node_set *ds_node_set_new(ds_node *nodes, int n, ds_node_wakes *wakes, ds_err *err);
void ds_node_set_free(ds_node_set *s);
/* Readable when a node's descriptor is ready (poll it with POLLIN). */
int ds_node_set_fd(const ds_node_set *s);
/* Nodes not done yet; SSH sessions opening (start_queue.h): counts kept as nodes change
 * (seen at their turns and wakes), not recounted. */
int ds_node_set_live(const ds_node_set *s);
int ds_node_set_connecting(const ds_node_set *s);
/* How long the poll may wait for the nodes' sake: 0 when a node was woken, else until
 * the earliest timer, -1 when there is none. */
int ds_node_set_timeout(ds_node_set *s, long long now_ms);
/* After the poll (polled: the set's fd was readable): gathers this pass's nodes to turn
 * (ready, woken, a timer due: keepalives are sent here) and returns how many. */
int ds_node_set_gather(ds_node_set *s, int polled, long long now_ms);
/* The k-th node gathered (its index); *ready: one of its descriptors was. */
int ds_node_set_nth(const ds_node_set *s, int k, int *ready);
/* Alarms are the loop's own, for checks it makes of a node on its tick (the heartbeat
 * check): node i's alarm at at_ms (0: none; a new one replaces the old). They do not
 * shorten the poll's timeout. ds_node_set_alarm_due takes the next node whose alarm is
 * due at now_ms, -1 when none. */
void ds_node_set_alarm(ds_node_set *s, int i, long long at_ms);
int ds_node_set_alarm_due(ds_node_set *s, long long now_ms);
/* After node i's turn: its registration as it asks now, its timers, the live count. -1
 * with err when epoll refuses. */
int ds_node_set_update(ds_node_set *s, int i, long long now_ms, ds_err *err);

#endif
