/* The end of a job on the terminal: one line when all went well; otherwise why it
 * stopped, every rank that did not end cleanly (host, exit code or signal) and the last
 * lines of the failed rank's stderr. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "job.h"
#include "ds_clock.h"

static const char *host_of(const ds_job *job, int r) {
    return job->plan->nodes[job->plan->ranks[r].node_rank].host;
}

static void describe(const ds_rank_status *rs, char *buf, size_t cap) {
    if (rs->state == DS_RANK_PENDING) snprintf(buf, cap, "never started");
    else if (rs->state == DS_RANK_RUNNING) snprintf(buf, cap, "lost (no exit reported)");
    else if (rs->sig) snprintf(buf, cap, "%s signal %d (%s)", rs->after_stop ? "stopped by" : "killed by", rs->sig, sigabbrev_np(rs->sig) ? sigabbrev_np(rs->sig) : "?");
    else snprintf(buf, cap, "exit code %d%s", rs->code, rs->after_stop && rs->code ? " (while stopping)" : "");
}

static void print_tail(const ds_job *job, int r) {
    const char *lines[DS_LOG_TAIL_LINES];
    int n = ds_logs_tail(job->logs, r, lines);
    if (!n) {
        fprintf(stderr, "dslaunch: rank %d wrote nothing to stderr\n", r);
        return;
    }
    fprintf(stderr, "dslaunch: last lines of rank %d's stderr (%s):\n", r, host_of(job, r));
    for (int i = 0; i < n; i++) fprintf(stderr, "    %s\n", lines[i]);
}

int ds_job_summary(ds_job *job) {
    int world = job->plan->world_size, clean = 0, stopped = 0;
    double secs = (double)(ds_now_ms() - job->t0_ms) / 1000;
    for (int r = 0; r < world; r++) {
        const ds_rank_status *rs = &job->ranks[r];
        if (rs->state == DS_RANK_EXITED && !rs->sig && !rs->code) clean++;
        else if (rs->state == DS_RANK_EXITED && rs->after_stop) stopped++;
    }
    if (!job->failure[0] && clean == world) {
        fprintf(stderr, "dslaunch: job %s: all %d ranks exited 0 in %.1f s; logs in %s\n", job->id, world, secs,
                job->attempt_dir);
        ds_event(job->ev, "job finished: success");
        return 0;
    }
    fprintf(stderr, "dslaunch: job %s FAILED after %.1f s: %s\n", job->id, secs,
            job->failure[0] ? job->failure : "not every rank exited 0");
    for (int i = 0; i < job->plan->nnodes; i++) {
        const ds_node *n = &job->nodes[i];
        if (n->failed && !strstr(job->failure, n->error))
            fprintf(stderr, "dslaunch: node %d (%s): %s\n", i, job->plan->nodes[i].host, n->error);
    }
    fprintf(stderr, "dslaunch:   rank  host                  result\n");
    int shown = 0;
    for (int r = 0; r < world; r++) {
        const ds_rank_status *rs = &job->ranks[r];
        int ok = rs->state == DS_RANK_EXITED && !rs->sig && !rs->code;
        int quiet = ok || (rs->state == DS_RANK_EXITED && rs->after_stop);
        /* Big jobs: the ranks that stopped because we asked are counted, not listed. */
        if (quiet && (world > 16 || ok) && r != job->first_failed_rank) continue;
        char how[128];
        describe(rs, how, sizeof how);
        fprintf(stderr, "dslaunch:   %4d  %-20s  %s%s\n", r, host_of(job, r), how,
                r == job->first_failed_rank ? "   <- first failure" : "");
        shown++;
    }
    fprintf(stderr, "dslaunch:   (%d exited 0, %d stopped by dslaunch, %d listed above)\n", clean, stopped, shown);
    if (job->first_failed_rank >= 0) print_tail(job, job->first_failed_rank);
    fprintf(stderr, "dslaunch: logs in %s\n", job->attempt_dir);
    ds_event(job->ev, "job finished: FAILED: %s", job->failure[0] ? job->failure : "not every rank exited 0");
    if (job->interrupted) return 128 + job->interrupted;
    return 1;
}
