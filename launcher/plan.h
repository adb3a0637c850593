/* The plan: which rank runs where, with which environment. Built from a filtered
 * hostlist and the job spec; printed as JSON by `dslaunch --dry-run` (schema in
 * docs/plan.md). */
#ifndef DS_PLAN_H
#define DS_PLAN_H

#include <stdio.h>

#include "hostfile.h"
#include "jobspec.h"

typedef struct ds_plan_rank {
    int rank, node_rank, local_rank, slot;
} ds_plan_rank;

typedef struct ds_plan_node {
    char *host;
    int node_rank;
    int *slots; /* slot indices kept, in order */
    int nslots;
    int first_rank; /* global rank of its local rank 0 */
    int local;      /* 1 when this is the controller's own host (started by fork/exec) */
} ds_plan_node;

typedef struct ds_plan {
    int world_size;
    char *master_addr;
    int master_port;
    int gpus;             /* 1 when slots are GPUs (CUDA_VISIBLE_DEVICES is set per rank) */
    ds_plan_node *nodes;
    int nnodes;
    ds_plan_rank *ranks;  /* by global rank */
    ds_hostlist spares;   /* hosts marked spare, not in the world */
} ds_plan;

/* master_addr NULL: the first node's host. Takes no ownership of hl or spec. */
int ds_plan_build(ds_plan *plan, const ds_hostlist *hl, const ds_jobspec *spec,
                  const char *master_addr, int master_port, ds_err *err);

/* The environment of rank r (DESIGN.md's list + [env] + CUDA_VISIBLE_DEVICES for GPU
 * slots), as a NULL-terminated "KEY=VALUE" array (free with ds_plan_env_free). The store
 * token and DS_RDZV are added by the controller, not here. */
char **ds_plan_rank_env(const ds_plan *plan, const ds_jobspec *spec, int r, const char *job_id,
                        int attempt);
void ds_plan_env_free(char **env);

/* The plan as one JSON document (docs/plan.md). */
void ds_plan_write_json(const ds_plan *plan, FILE *out);

void ds_plan_free(ds_plan *plan);

#endif
