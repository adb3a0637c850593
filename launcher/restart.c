#include "restart.h"

#include "job.h"

void ds_restart_init(ds_restart *rs, const ds_jobspec *spec, const ds_plan *plan) {
    rs->spec = spec;
    rs->plan = plan;
    rs->restarts = 0;
}

void ds_restart_free(ds_restart *rs) { (void)rs; }

static long long backoff(const ds_restart *rs) {
    long long ms = rs->spec->backoff_ms;
    for (int i = 0; i < rs->restarts && ms < rs->spec->backoff_max_ms; i++) ms *= 2;
    return ms < rs->spec->backoff_max_ms ? ms : rs->spec->backoff_max_ms;
}

int ds_restart_next(ds_restart *rs, const ds_job *job, long long *wait_ms, ds_end *end) {
    *wait_ms = 0;
    if (job->drain_sig && !job->interrupted) { /* a rank that failed while draining is not restarted */
        *end = ds_job_attempt_ok(job) ? DS_END_DRAINED : DS_END_FAILED;
        return 0;
    }
    if (ds_job_attempt_ok(job)) {
        *end = DS_END_OK;
        return 0;
    }
    if (job->interrupted) {
        *end = DS_END_INTERRUPTED;
        return 0;
    }
    if (job->root.found && job->root.f.user_error) {
        *end = DS_END_USER_ERROR;
        return 0;
    }
    *end = DS_END_FAILED;
    if (rs->restarts >= rs->spec->max_restarts) return 0;
    *wait_ms = backoff(rs);
    rs->restarts++;
    return 1;
}
