/* The job object's own operations, apart from the loop that drives it (controller.c)
 * and the handlers of what agents say (job_report.c), which both stop a job. */
#include "job.h"

#include <stdarg.h>
#include <stdio.h>

#include "ds_clock.h"

void ds_job_stop(ds_job *job, const char *fmt, ...) {
    if (job->stopping) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->failure, sizeof job->failure, fmt, ap);
    va_end(ap);
    job->stopping = 1;
    job->kill_at_ms = ds_now_ms() + DS_STOP_GRACE_MS + DS_STOP_SLACK_MS;
    ds_event(job->ev, "stopping the job: %s", job->failure);
    for (int i = 0; i < job->plan->nnodes; i++) ds_node_stop(&job->nodes[i]);
}
