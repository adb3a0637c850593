/* The plan of the next attempt when nodes are excluded: each excluded node is replaced,
 * in place (same node rank, same ranks), by the first unused spare with enough slots;
 * with no such spare it is dropped, which [restart] min_nodes must allow (the world
 * shrinks and the ranks are numbered again). Spares not used stay spares. */
#ifndef DS_REPLAN_H
#define DS_REPLAN_H

#include "plan.h"

/* excluded[i] (a host name) may name world nodes and spares alike. On success fills out
 * (free with ds_plan_free) and appends what changed, in words, to what (cap). -1 with err
 * when too few nodes would be left. out's nodes are named as in the hostfile (an ssh
 * config alias, not its HostName: see ds_plan_apply_ssh_config); a MASTER_ADDR that was
 * node 0's host becomes the new node 0's. */
int ds_replan(ds_plan *out, const ds_plan *cur, char *const *excluded, int nexcluded, int min_nodes,
              char *what, size_t cap, ds_err *err);

#endif
