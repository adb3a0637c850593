/* Runs a planned job: starts every node's agent (fork/exec locally, SSH elsewhere),
 * serves the rendezvous store, demultiplexes logs, supervises, stops everything on any
 * failure or on SIGINT/SIGTERM. Returns dslaunch's exit status (0 only when every rank
 * exited 0). main.c calls it after the job spec (with command-line overrides applied)
 * and the plan are built. */
#ifndef DS_CONTROLLER_H
#define DS_CONTROLLER_H

#include "jobspec.h"
#include "plan.h"

int ds_controller_run(const ds_jobspec *spec, const ds_plan *plan);

#endif
