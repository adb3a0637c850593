/* How each node's agent is started: [launch] method (docs/slurm.md). ssh starts the
 * controller's own node by fork/exec and every other node over SSH (running.md); srun
 * starts every node's agent in one Slurm job step (srun.h); local starts every agent by
 * fork/exec on this machine. */
#ifndef DS_LAUNCH_METHOD_H
#define DS_LAUNCH_METHOD_H

#include "ds_err.h"
#include "jobspec.h"
#include "plan.h"

/* Resolves spec->launch_method from auto (srun when the hosts come from a Slurm
 * allocation, else ssh) and checks that the choice fits: srun needs an allocation;
 * local needs every node to be this machine (its host name, or this node's name in
 * the allocation, which then marks the plan's node local) and no [ssh] force. */
int ds_launch_resolve(ds_jobspec *spec, ds_plan *plan, ds_err *err);

/* "ssh", "srun", "local" ("auto" before resolving). */
const char *ds_launch_name(ds_launch_method m);

#endif
