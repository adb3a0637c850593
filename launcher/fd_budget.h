/* How many descriptors the controller needs for a job, checked before anything starts,
 * so a job too big for the limit is refused with what to do instead of failing halfway
 * (an agent that cannot be started, a store that cannot accept). Per node: its agent's
 * three pipes (local, srun) or SSH socket, its store connection and one to spare (the
 * second SSH channel of a kill); per job: the rank log files open at once (log_files.h)
 * and the controller's own (store, signals, logs, monitor). Ranks cost none. A node
 * started through a relay (relay.h) costs its three pipes twice (the controller's ends
 * and those of the thread that serves the relays) and its store connection; the relays
 * themselves, ~√N, are within the per-job part. */
#ifndef DS_FD_BUDGET_H
#define DS_FD_BUDGET_H

#include "ds_err.h"

#define DS_FDS_PER_NODE 5
#define DS_FDS_PER_RELAYED_NODE 7
#define DS_FDS_PER_JOB 192

/* relayed: 1 when the nodes start through relays. */
long ds_fd_budget(int nnodes, int relayed);
/* Raises the soft RLIMIT_NOFILE to the hard limit; -1 (err says what to do) when the job
 * needs more than that. */
int ds_fd_budget_check(int nnodes, int relayed, ds_err *err);
/* The same against a given limit (for tests). */
int ds_fd_budget_fits(int nnodes, int relayed, long limit, ds_err *err);

#endif
