/* An attempt's outcome on the terminal: when it failed, its root cause (failure.h), every
 * rank that did not end cleanly (host, exit code or signal, cause or consequence) and the
 * last lines of the root cause's stderr. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"

static const char *host_of(const ds_job *job, int r) {
    return job->plan->nodes[job->plan->ranks[r].node_rank].host;
}

static int failed(const ds_rank_status *rs) {
    return rs->state == DS_RANK_EXITED && (rs->code || rs->sig);
}

/* Ended by the TERM/KILL of dslaunch's own teardown: reported after the job began
 * stopping, and (when its agent said when) not ended before that. The teardown sends
 * KILL only after the grace period: a KILL before then came from elsewhere (the kernel's
 * OOM killer, a user), even if it arrived in the same millisecond as the stop. */
static int stopped_by_us(const ds_job *job, const ds_rank_status *rs) {
    if (!rs->after_stop || (rs->sig != SIGTERM && rs->sig != SIGKILL)) return 0;
    if (!rs->ended_ms) return 1;
    long long ours_from = job->stop_wall_ms + (rs->sig == SIGKILL ? DS_STOP_GRACE_MS / 2 : 0);
    return rs->ended_ms >= ours_from;
}

static void rank_failure(const ds_job *job, int r, ds_failure *f) {
    const ds_rank_status *rs = &job->ranks[r];
    const ds_failure_record *rec = &rs->rec;
    memset(f, 0, sizeof *f);
    f->rank = r;
    f->node = job->plan->ranks[r].node_rank;
    f->at_ms = rec->kind[0] && rec->at_ms ? rec->at_ms : rs->ended_ms;
    /* A rank stopped by our teardown that had already recorded an error of its own (a
     * program's error file: its process can take seconds to end) failed by itself. */
    int erred_before_stop = rec->kind[0] && rec->at_ms && job->stop_wall_ms && rec->at_ms < job->stop_wall_ms;
    f->consequence = rec->transport || (stopped_by_us(job, rs) && !erred_before_stop) ||
                     (job->sched_signal && rs->sig == job->sched_signal);
    f->user_error = !strcmp(rec->kind, "load");
    const char *host = host_of(job, r);
    if (!strcmp(rec->kind, "load"))
        snprintf(f->what, sizeof f->what, "rank %d on %s could not load its script: %s", r, host, rec->message);
    else if (rec->kind[0])
        snprintf(f->what, sizeof f->what, "rank %d on %s failed: %s", r, host, rec->message);
    else if (rs->sig)
        snprintf(f->what, sizeof f->what, "rank %d on %s was killed by signal %d (%s)", r, host, rs->sig,
                 strsignal(rs->sig));
    else
        snprintf(f->what, sizeof f->what, "rank %d on %s exited with code %d", r, host, rs->code);
    /* A record's first line is the message; its traceback is in the rank's stderr. */
    char *nl = strchr(f->what, '\n');
    if (nl) *nl = 0;
}

/* Every failure of the attempt; returns how many (out has room for world + nodes + 2). */
static int collect(const ds_job *job, ds_failure *out) {
    int n = 0;
    for (int r = 0; r < job->plan->world_size; r++)
        if (failed(&job->ranks[r])) rank_failure(job, r, &out[n++]);
    for (int i = 0; i < job->plan->nnodes; i++) {
        const ds_node *nd = &job->nodes[i];
        if (!nd->failed) continue;
        ds_failure *f = &out[n++];
        memset(f, 0, sizeof *f);
        f->rank = -1;
        f->node = i;
        f->at_ms = nd->failed_wall_ms;
        f->consequence = nd->stop_kill; /* dslaunch killed it while stopping */
        snprintf(f->what, sizeof f->what, "node %d (%.200s): %.700s", i, nd->plan->host, nd->error);
    }
    if (job->hang.what[0]) out[n++] = job->hang;
    if (job->interrupted && job->stopping) { /* asked to stop: that is the cause */
        ds_failure *f = &out[n++];
        memset(f, 0, sizeof *f);
        f->rank = f->node = -1;
        f->at_ms = job->stop_wall_ms;
        snprintf(f->what, sizeof f->what, "%s", job->failure);
    }
    return n;
}

int ds_job_attempt_ok(const ds_job *job) {
    if (job->failure[0]) return 0;
    for (int r = 0; r < job->plan->world_size; r++) {
        const ds_rank_status *rs = &job->ranks[r];
        if (rs->state != DS_RANK_EXITED || rs->code || rs->sig) return 0;
    }
    return 1;
}

void ds_job_find_root(ds_job *job) {
    ds_failure *f = calloc((size_t)(job->plan->world_size + job->plan->nnodes + 2), sizeof *f);
    if (!f) return;
    int n = collect(job, f);
    int root = ds_failure_pick_root(f, n);
    memset(&job->root, 0, sizeof job->root);
    if (root >= 0) {
        job->root.found = 1;
        job->root.f = f[root];
        job->root.nconsequences = n - 1;
    } else if (job->failure[0]) {
        job->root.found = 1;
        job->root.f.rank = job->root.f.node = -1;
        snprintf(job->root.f.what, sizeof job->root.f.what, "%s", job->failure);
    }
    free(f);
}

static void describe(const ds_job *job, const ds_rank_status *rs, char *buf, size_t cap) {
    if (rs->state == DS_RANK_PENDING) snprintf(buf, cap, "never started");
    else if (rs->state == DS_RANK_RUNNING) snprintf(buf, cap, "lost (no exit reported)");
    else if (rs->sig)
        snprintf(buf, cap, "%s signal %d (%s)", stopped_by_us(job, rs) ? "stopped by" : "killed by", rs->sig,
                 sigabbrev_np(rs->sig) ? sigabbrev_np(rs->sig) : "?");
    else if (rs->rec.transport) snprintf(buf, cap, "exit code %d (its communicator had broken)", rs->code);
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

static void human(long long bytes, char *buf, size_t cap) {
    if (bytes < 10 * 1024) snprintf(buf, cap, "%lld bytes", bytes);
    else if (bytes < 10 * 1024 * 1024) snprintf(buf, cap, "%.1f KiB", (double)bytes / 1024);
    else snprintf(buf, cap, "%.1f MiB", (double)bytes / (1024 * 1024));
}

long long ds_job_report_lost_logs(const ds_job *job) {
    long long total = 0;
    char line[1024] = "", a[32], b[32];
    int listed = 0;
    for (int r = 0; r < job->plan->world_size; r++) {
        long long out = ds_logs_lost(job->logs, r, 1), err = ds_logs_lost(job->logs, r, 2);
        if (!out && !err) continue;
        total += out + err;
        human(out, a, sizeof a);
        human(err, b, sizeof b);
        size_t len = strlen(line);
        if (listed++ < 8 && len + 100 < sizeof line)
            snprintf(line + len, sizeof line - len, "%srank %d: %s of stdout, %s of stderr", listed > 1 ? "; " : "", r, a, b);
    }
    if (!total) return 0;
    human(total, a, sizeof a);
    fprintf(stderr, "dslaunch: LOGS LOST in attempt %d: %s did not reach %s (%s%s)\n", job->attempt, a, job->attempt_dir,
            line, listed > 8 ? "; ..." : "");
    ds_json *j = ds_event_begin(job->ev, "logs_lost");
    if (j) {
        ds_json_kint(j, "attempt", job->attempt);
        ds_json_kint(j, "bytes", total);
    }
    ds_event_end(job->ev, "%s of rank logs lost in attempt %d: %s", a, job->attempt, line);
    return total;
}

void ds_job_report_attempt(const ds_job *job) {
    int world = job->plan->world_size, clean = 0, stopped = 0, shown = 0;
    int root_rank = job->root.found ? job->root.f.rank : -1;
    for (int i = 0; i < job->plan->nnodes; i++) {
        const ds_node *n = &job->nodes[i];
        if (n->failed && !strstr(job->root.f.what, n->error))
            fprintf(stderr, "dslaunch: node %d (%s): %s%s\n", i, job->plan->nodes[i].host, n->error,
                    n->stop_kill ? " (stopped by dslaunch)" : "");
    }
    fprintf(stderr, "dslaunch:   rank  host                  result\n");
    for (int r = 0; r < world; r++) {
        const ds_rank_status *rs = &job->ranks[r];
        int ok = rs->state == DS_RANK_EXITED && !rs->sig && !rs->code;
        clean += ok;
        int quiet = ok || (rs->state == DS_RANK_EXITED && stopped_by_us(job, rs));
        stopped += !ok && quiet;
        /* Big jobs: the ranks that stopped because we asked are counted, not listed. */
        if (quiet && (world > 16 || ok) && r != root_rank) continue;
        char how[160];
        describe(job, rs, how, sizeof how);
        fprintf(stderr, "dslaunch:   %4d  %-20s  %s%s\n", r, host_of(job, r), how,
                r == root_rank ? "   <- root cause" : failed(rs) ? "   (consequence)" : "");
        shown++;
    }
    fprintf(stderr, "dslaunch:   (%d exited 0, %d stopped by dslaunch, %d listed above)\n", clean, stopped, shown);
    if (root_rank >= 0) print_tail(job, root_rank);
    fprintf(stderr, "dslaunch: logs in %s\n", job->attempt_dir);
}
