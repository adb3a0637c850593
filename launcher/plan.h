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
    char *host;     /* the address: the hostfile's name, or its HostName in the ssh config */
    char *alias;    /* the hostfile's name when it differs from host, else NULL */
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
    char *hosts_from;     /* where the hosts came from, in words (dslaunch sets it; NULL:
                             not printed); freed with the plan */
} ds_plan;

/* master_addr NULL: the first node's host. Takes no ownership of hl or spec. Hosts
 * marked spare, and the last spec->spares of the others, go to plan->spares; slots are
 * GPUs (plan->gpus) when spec->device is DS_DEVICE_CUDA. */
int ds_plan_build(ds_plan *plan, const ds_hostlist *hl, const ds_jobspec *spec,
                  const char *master_addr, int master_port, ds_err *err);

/* The environment of rank r (docs/running.md's list + [env] + CUDA_VISIBLE_DEVICES for GPU
 * slots), as a NULL-terminated "KEY=VALUE" array (free with ds_plan_env_free); NULL when
 * r is out of range or memory runs out. spec may be NULL (no [env]). The store token and
 * DS_RDZV are added by the controller, not here. */
char **ds_plan_rank_env(const ds_plan *plan, const ds_jobspec *spec, int r, const char *job_id,
                        int attempt);
void ds_plan_env_free(char **env);

/* The plan as one JSON document (docs/plan.md), indented. */
void ds_plan_write_json(const ds_plan *plan, FILE *out);
/* The same with a "job" object and every rank's "env" (what --dry-run prints) when spec
 * is not NULL; job_id and attempt fill DS_JOB_ID and DS_ATTEMPT. Compact (one line)
 * when pretty is 0. */
void ds_plan_write_json_spec(const ds_plan *plan, const ds_jobspec *spec, const char *job_id,
                             int attempt, int pretty, FILE *out);
/* Same as a malloc'd string (NULL when out of memory). */
char *ds_plan_json(const ds_plan *plan, const ds_jobspec *spec, const char *job_id, int attempt,
                   int pretty);

struct ds_ssh_config;
/* Resolves the nodes' hosts through the ssh configuration (plan_ssh.c): a name with a
 * HostName becomes the node's alias and the HostName its host; MASTER_ADDR follows node
 * 0's host unless master_given; how each node other than this one is reached is checked
 * (ssh_target.h). Errors name the configuration's file:line. */
int ds_plan_apply_ssh_config(ds_plan *plan, const ds_jobspec *spec, const struct ds_ssh_config *cfg,
                             int master_given, ds_err *err);
/* Refuses a loopback MASTER_ADDR when a node is elsewhere (they could not reach it, nor
 * the store there): for hosts SSH reaches by name (a Slurm allocation's node names say
 * nothing of that). */
int ds_plan_check_master_addr(const ds_plan *plan, ds_err *err);

/* 1 when host names the controller's own node: localhost, 127.0.0.1, ::1 or this
 * machine's hostname. Other loopback addresses (127.0.0.2, ...) are not local: tests use
 * them as distinct nodes reached over SSH. */
int ds_host_is_local(const char *host);

void ds_plan_free(ds_plan *plan);

#endif
