/* The restart policy: after each attempt, whether to run another and on which plan. An
 * attempt that failed is restarted while `[restart] max_restarts` allows, after a
 * backoff (`backoff`, doubled each time up to `backoff_max`); one that failed because
 * the job itself is wrong (a script that cannot be loaded), was interrupted, was
 * drained, or succeeded ends the invocation. */
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

typedef struct ds_restart {
    const ds_jobspec *spec;
    const ds_plan *plan; /* the plan the next attempt runs */
    int restarts;        /* restarts made so far */
} ds_restart;

void ds_restart_init(ds_restart *rs, const ds_jobspec *spec, const ds_plan *plan);
void ds_restart_free(ds_restart *rs);

/* After an attempt (job->root filled for a failed one): 1 to run another after
 * *wait_ms, 0 to end the invocation as *end. */
int ds_restart_next(ds_restart *rs, const struct ds_job *job, long long *wait_ms, ds_end *end);

#endif
