/* Every process a rank starts, found and killed however it left (a new session, a
 * double fork): on a node with cgroup v2 that the agent may write to, each rank runs in a
 * cgroup of its own, <agent's cgroup>/dslaunch-<agent pid>-node<N>/rank-<R>, and its
 * end, the agent's end, or (when the agent is killed) the rank's own lifeline writes
 * cgroup.kill there, which the kernel applies to every member. Elsewhere each worker is a
 * child subreaper instead (its orphans come back to it) and its lifeline sweeps its
 * descendants (runtime/worker/lifeline.c). DS_CGROUP=off in the agent's environment
 * forces the subreaper way. An agent removes the empty cgroups of agents that died
 * before they could. */
#ifndef DS_CGROUP_H
#define DS_CGROUP_H

/* The node's cgroup for this agent, created, or NULL (why says why: no cgroup v2, not
 * writable, DS_CGROUP=off). Removes stale dslaunch cgroups of dead agents first. */
char *ds_cgroup_node_create(int node, char *why, unsigned long cap);
/* base/rank-<rank>, created (malloc'd), or NULL. */
char *ds_cgroup_rank_create(const char *base, int rank);
/* Kills what is left in base's rank cgroups and removes them and base (waits up to
 * about a second for the kernel to empty them). */
void ds_cgroup_node_remove(const char *base);

#endif
