/* The job's monitor (monitor.h) set up from the job: the one place that knows where the
 * job keeps what the monitor shows besides the ranks' records (the attempt's directory,
 * the restarts so far, the event log), so that how runs and attempts are laid out can
 * change here alone. Each attempt has its own monitor, its files in attempt-K/. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "job.h"
#include "monitor.h"

/* Attempt K runs after K restarts. */
static int restarts_so_far(const ds_job *job) { return job->attempt; }

static void terminal_hook(void *monitor, int before) { ds_monitor_terminal(monitor, before); }

int ds_job_monitor_open(ds_job *job, ds_err *err) {
    const ds_plan *plan = job->plan;
    const char **hosts = calloc((size_t)plan->world_size, sizeof *hosts);
    char *events = NULL;
    if (!hosts || asprintf(&events, "%s/launcher.log", job->run_dir) < 0) {
        free(hosts);
        return ds_err_set(err, "out of memory");
    }
    for (int r = 0; r < plan->world_size; r++) hosts[r] = plan->nodes[plan->ranks[r].node_rank].host;
    ds_monitor_opts o = {
        .dir = job->attempt_dir,
        .job_id = job->id,
        .world = plan->world_size,
        .hosts = hosts,
        .outputs = job->spec->monitor_outputs,
        .steps_per_print = job->spec->steps_per_print,
        /* a restart serves where the first attempt did, a free port (0) included */
        .metrics_port = job->metrics_port > 0 ? job->metrics_port : job->spec->metrics_port,
        .metrics_addr = job->spec->metrics_addr,
        .progress_fd = 2,
        .tty = isatty(2),
        .restarts = restarts_so_far(job),
        .events_path = events,
        /* the invocation's clock, as launcher.log's elapsed_s: a restart's rows and
         * events continue the run's time line */
        .t0_ms = job->run_t0_ms,
        .ev = job->ev,
    };
    job->monitor = ds_monitor_open(&o, err);
    free(hosts);
    free(events);
    if (!job->monitor) return -1;
    if (ds_monitor_metrics_port(job->monitor) > 0) job->metrics_port = ds_monitor_metrics_port(job->monitor);
    ds_logs_on_terminal(job->logs, terminal_hook, job->monitor);
    return 0;
}

void ds_job_monitor_end(ds_job *job) {
    char outcome[1100];
    long long step;
    int ok = ds_job_attempt_ok(job);
    if (ok && job->drain_sig && !job->interrupted && (step = ds_job_drain_step(job)) >= 0)
        snprintf(outcome, sizeof outcome, "drained at step %lld", step);
    else if (ok) snprintf(outcome, sizeof outcome, "finished");
    else snprintf(outcome, sizeof outcome, "FAILED: %s", job->failure[0] ? job->failure : "not every rank exited 0");
    ds_monitor_end(job->monitor, outcome);
}
