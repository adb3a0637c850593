/* A Slurm allocation as the source of a job's hosts (docs/slurm.md): inside `salloc` or
 * `sbatch` the nodes come from SLURM_JOB_NODELIST and the slots per node from the GPUs
 * or the tasks Slurm gave, so a job needs no hostfile there. Read from the environment
 * Slurm sets; nothing here talks to Slurm's daemons. */
#ifndef DS_SLURM_H
#define DS_SLURM_H

#include "ds_err.h"
#include "hostfile.h"
#include "jobspec.h"

/* Resolves spec->host_source from auto: the hostfile when one is given, else the Slurm
 * allocation when SLURM_JOB_ID is set, else this node. An explicit choice is checked:
 * hostfile needs a hostfile, slurm an allocation and no hostfile, local no hostfile. */
int ds_hosts_source_resolve(ds_jobspec *spec, ds_err *err);

/* 0 inside a Slurm allocation (SLURM_JOB_ID set); else -1 with err "WHAT, but this is
 * not inside a Slurm allocation ...", saying what to do. */
int ds_slurm_require_allocation(const char *what, ds_err *err);

/* The allocation's nodes, in SLURM_JOB_NODELIST's order, with their slots: GPUs when
 * Slurm gave GPUs (or spec->device is cuda), else [resources] num_gpus when the spec
 * gives it, else SLURM_TASKS_PER_NODE. Resolves spec->device from auto. *from gets a
 * malloc'd sentence saying where hosts and slots came from (for the plan). */
int ds_slurm_hosts(ds_hostlist *hl, ds_jobspec *spec, char **from, ds_err *err);

/* Where the controller's store listens inside an allocation when [rendezvous] addr is
 * not given: this node's Slurm name (SLURMD_NODENAME, set in a batch script or a step),
 * else this machine's host name (salloc's shell on a login node). */
const char *ds_slurm_store_addr(void);

/* Slurm's compressed counts, as in SLURM_TASKS_PER_NODE: "2(x3),1" is 2 2 2 1. *v is
 * malloc'd (*n entries, at most max). 0, or -1 with err saying what is wrong. */
int ds_slurm_counts_expand(const char *s, int max, int **v, int *n, ds_err *err);

#endif
