/* The memory planner from dslaunch (docs/memory.md): `dsrun plan-memory` run on this node
 * as a subprocess, with rank 0's environment, in the job's workdir, for the job's world
 * and ranks per node. The launcher itself holds no engine code. */
#ifndef DS_LAUNCH_PLAN_MEMORY_H
#define DS_LAUNCH_PLAN_MEMORY_H

#include "ds_err.h"
#include "jobspec.h"
#include "plan.h"

/* --plan-memory [--all]: prints the plan; returns dsrun's exit status (0 fits or no limit
 * known, 3 does not fit), or -1 with err when it could not be started. */
int ds_plan_memory_print(const ds_plan *plan, const ds_jobspec *spec, int all, ds_err *err);

/* The check before a launch: for a Lua job with an [engine] memory_limit, 0 when the plan
 * predicts the job fits (or could not plan it: a warning on stderr), -1 with err when it
 * predicts it does not (the plan's table and recommendation printed on stderr). */
int ds_plan_memory_check(const ds_plan *plan, const ds_jobspec *spec, ds_err *err);

#endif
