/* A worker dies with its agent: the agent keeps the write end of a pipe whose read end
 * each worker has as DS_AGENT_FD. When the agent is gone the pipe reports hang-up and
 * the worker kills everything it started, then itself: its cgroup as a whole
 * (DS_CGROUP_PATH, when the agent gave it one: runtime/agent/cgroup.h), else, as a child
 * subreaper (set from the start, so every orphan of its descendants comes back to it),
 * its descendants round by round, and its own process group. The agent also sets
 * PR_SET_PDEATHSIG for the moments before this watch runs; once it runs, the death
 * signal is cleared, since it would kill the worker alone and orphan its children. */
#ifndef DS_LIFELINE_H
#define DS_LIFELINE_H

#include "ds_err.h"

/* Starts the watching thread when DS_AGENT_FD is set; does nothing otherwise. */
int ds_lifeline_watch(ds_err *err);

#endif
