/* The restart policy: after each attempt, whether to run another and on which plan. An
 * attempt that failed is restarted while `[restart] max_restarts` allows, after a
 * backoff (`backoff`, doubled each time up to `backoff_max`); one that failed because
 * the job itself is wrong (a script that cannot be loaded), was interrupted, was
 * drained, or succeeded ends the invocation.
 *
 * Nodes: a node that fails (its agent lost, silent or in error) `node_retries` times, or
 * that could not be started at all (unreachable, its agent never said hello), is excluded
 * for the rest of the invocation and replaced by a spare (replan.h); with no spare left
 * and `min_nodes` set, the job goes on with fewer nodes, and grad_accum rises so that the
 * global batch (micro_batch x ranks x grad_accum) stays what it was when it divides,
 * else the summary says what changed. */
#ifndef DS_RESTART_H
#define DS_RESTART_H

#include "jobspec.h"
#include "plan.h"

struct ds_job;

/* How an invocation ends; exit_codes.h maps these to dslaunch's exit status. */
typedef enum {
    DS_END_OK,
    DS_END_FAILED,      /* failed, and no restart left */
    DS_END_USER_ERROR,  /* the job spec, hostfile or script is wrong */
    DS_END_INTERRUPTED, /* stopped by a signal that does not drain */
    DS_END_DRAINED,     /* drained on request: every rank checkpointed and exited 0 */
} ds_end;

typedef struct ds_host_record {
    char *host;
    int failures;
    int excluded;
    char why[300];
} ds_host_record;

typedef struct ds_restart {
    const ds_jobspec *spec; /* as given */
    ds_jobspec run_spec;    /* what attempts run with: spec, grad_accum adjusted (shallow copy) */
    const ds_plan *plan;    /* the plan the next attempt runs */
    ds_plan plans[2];       /* replans (the previous one lives until its attempt is freed) */
    int next_plan;
    int restarts;           /* restarts made so far */
    int world0;             /* the first attempt's world size (the global batch's) */
    ds_host_record *hosts;  /* every node and spare seen, with its failures */
    int nhosts;
    char note[1024];        /* what the last decision changed, in words ("" when nothing) */
} ds_restart;

void ds_restart_init(ds_restart *rs, const ds_jobspec *spec, const ds_plan *plan);
void ds_restart_free(ds_restart *rs);

/* After an attempt (job->root filled for a failed one): 1 to run another after
 * *wait_ms (on rs->plan with rs->run_spec), 0 to end the invocation as *end. */
int ds_restart_next(ds_restart *rs, const struct ds_job *job, long long *wait_ms, ds_end *end);

#endif
