/* The controller's side of a drain (runtime/worker/drain.h has the ranks' side): set the
 * attempt's "drain" key, let the ranks finish their step, save and exit, and stop them if
 * they take longer than [restart] drain_timeout. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_clock.h"
#include "job.h"

static void key(const ds_job *job, char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "a%d/%s", job->attempt, name); /* the workers' namespace */
}

static int any_rank_drains(const ds_job *job) {
    char k[96], name[48];
    for (int r = 0; r < job->plan->world_size; r++) {
        snprintf(name, sizeof name, "drain/aware/%d", r);
        key(job, k, sizeof k, name);
        if (ds_store_server_get(job->store, k, NULL, NULL) == 1) return 1;
    }
    return 0;
}

void ds_job_drain(ds_job *job, int sig) {
    if (job->stopping || job->drain_sig) return;
    job->drain_sig = sig;
    if (!any_rank_drains(job)) {
        job->interrupted = sig;
        ds_monitor_terminal(job->monitor, 1);
        fprintf(stderr, "dslaunch: SIG%s: the script does not drain (no rank has called ds.drain_requested): "
                        "stopping every rank\n", sigabbrev_np(sig));
        ds_monitor_terminal(job->monitor, 0);
        ds_job_stop(job, "interrupted by SIG%s (the script does not drain)", sigabbrev_np(sig));
        return;
    }
    char k[64];
    ds_err err = {{0}};
    key(job, k, sizeof k, "drain");
    if (ds_store_server_set(job->store, k, "1", 1, &err) != 0) {
        job->interrupted = sig;
        ds_job_stop(job, "drain on SIG%s failed: %s", sigabbrev_np(sig), err.msg);
        return;
    }
    job->drain_deadline_ms = ds_now_ms() + job->spec->drain_timeout_ms;
    ds_monitor_terminal(job->monitor, 1);
    fprintf(stderr, "dslaunch: SIG%s: draining: every rank finishes its step, saves a checkpoint and exits "
                    "(again to stop at once)\n", sigabbrev_np(sig));
    ds_monitor_terminal(job->monitor, 0);
    ds_json *j = ds_event_begin(job->ev, "draining");
    if (j) {
        ds_json_kint(j, "attempt", job->attempt);
        ds_json_kstr(j, "signal", sigabbrev_np(sig));
    }
    ds_event_end(job->ev, "draining on SIG%s (attempt %d)", sigabbrev_np(sig), job->attempt);
}

void ds_job_check_drain(ds_job *job) {
    if (!job->drain_sig || job->stopping || ds_now_ms() < job->drain_deadline_ms) return;
    job->interrupted = job->drain_sig;
    ds_job_stop(job, "the drain on SIG%s did not finish within drain_timeout (%.0f s)", sigabbrev_np(job->drain_sig),
                job->spec->drain_timeout_ms / 1000.0);
}

long long ds_job_drain_step(const ds_job *job) {
    char k[64], *v = NULL;
    key(job, k, sizeof k, "drain/step");
    if (ds_store_server_get(job->store, k, &v, NULL) != 1) return -1;
    long long step = strtoll(v, NULL, 10);
    free(v);
    return step;
}
