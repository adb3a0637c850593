/* Killing a process tree, however its members escaped their process group: a cgroup v2
 * (cgroup.kill kills every member) or, without one, the descendants of a child
 * subreaper, swept round by round (killed children's orphans come back to it). Used by
 * the agent (its node) and the worker (itself, when its agent is gone). */
#ifndef DS_PROCTREE_H
#define DS_PROCTREE_H

/* Writes "1" to path/cgroup.kill. Async-signal-safe; nothing happens for a bad path. */
void ds_cgroup_kill(const char *path);

/* SIGKILLs every child of every thread of this process and reaps it, round after round,
 * until none is left (at most 100 rounds): with PR_SET_CHILD_SUBREAPER set, every
 * descendant comes back as a child and goes too. */
void ds_kill_descendants(void);

#endif
