/* The job object's own operations, apart from the loop that drives it (controller.c)
 * and the handlers of what agents say (job_report.c), which both stop a job. */
#include "job.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_clock.h"
#include "relay.h"
#include "srun.h"

void ds_job_end_attempt(ds_job *job) {
    ds_srun_free(job); /* each attempt runs its own step */
    ds_relay_free(job); /* and its own relays */
    if (job->nodes)
        for (int i = 0; i < job->plan->nnodes; i++) ds_node_free(&job->nodes[i]);
    free(job->nodes);
    job->nodes = NULL;
    if (job->ranks)
        for (int r = 0; r < job->plan->world_size; r++) ds_failure_record_free(&job->ranks[r].rec);
    free(job->ranks);
    job->ranks = NULL;
    ds_monitor_close(job->monitor);
    job->monitor = NULL;
    ds_logs_close(job->logs);
    job->logs = NULL;
    free(job->attempt_dir);
    job->attempt_dir = NULL;
}

int ds_job_begin_attempt(ds_job *job, int attempt, const ds_plan *plan, ds_err *err) {
    ds_job_end_attempt(job);
    job->plan = plan;
    job->attempt = attempt;
    job->nstarted = job->nexited = job->nfailed_ranks = job->nqueued = job->queue_at = 0;
    job->t0_ms = ds_now_ms();
    job->all_started_ms = 0;
    job->stopping = 0;
    job->stop_wall_ms = job->kill_at_ms = job->drop_at_ms = 0;
    job->failure[0] = 0;
    memset(&job->root, 0, sizeof job->root);
    memset(&job->hang, 0, sizeof job->hang);
    job->resumed_step = -1;
    job->wakes.head = NULL; /* (the last attempt's nodes are gone) */
    job->nodes = calloc((size_t)plan->nnodes, sizeof *job->nodes);
    job->ranks = calloc((size_t)plan->world_size, sizeof *job->ranks);
    if (!job->nodes || !job->ranks || asprintf(&job->attempt_dir, "%s/attempt-%d", job->run_dir, attempt) < 0) {
        job->attempt_dir = NULL;
        return ds_err_set(err, "out of memory");
    }
    for (int i = 0; i < plan->nnodes; i++) {
        ds_node *n = &job->nodes[i];
        n->plan = &plan->nodes[i];
        n->local.in_fd = n->local.out_fd = n->local.err_fd = -1;
        n->wakes = &job->wakes;
    }
    job->logs = ds_logs_open(job->attempt_dir, plan, job->spec->tee, job->spec->log_mode, err); /* creates the dir */
    return job->logs ? 0 : -1;
}

void ds_job_stop(ds_job *job, const char *fmt, ...) {
    if (job->stopping) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(job->failure, sizeof job->failure, fmt, ap);
    va_end(ap);
    job->stopping = 1;
    job->stop_wall_ms = ds_wall_ms();
    job->kill_at_ms = ds_now_ms() + DS_STOP_GRACE_MS + DS_STOP_SLACK_MS;
    ds_event(job->ev, "stopping the job: %s", job->failure);
    for (int i = 0; i < job->plan->nnodes; i++) ds_node_stop(&job->nodes[i]);
}

void ds_job_node_failed(ds_job *job, ds_node *n, const char *why) {
    (void)job;
    if (n->failed) return;
    snprintf(n->error, sizeof n->error, "%s", why);
    n->failed = 1;
    n->failed_wall_ms = ds_wall_ms();
}
