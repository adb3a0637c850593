/* The controller's watch over the ranks' liveness reports (runtime/worker/
 * progress_reporter.h; not the progress line of progress.c, which shows the metrics):
 * where an attempt resumed, and hangs. A rank whose step has not moved for [restart]
 * hang_timeout is stuck; the ranks stuck outside any collective, or that stopped
 * reporting at all, are the cause; those waiting in a collective for them are its
 * consequences. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_clock.h"
#include "job.h"

int ds_rank_progress_interval_ms(const ds_jobspec *spec) {
    if (spec->hang_timeout_ms <= 0) return 0;
    int ms = spec->hang_timeout_ms / 4;
    return ms < 100 ? 100 : ms > 5000 ? 5000 : ms;
}

static void read_report(ds_job *job, int r, long long now) {
    char key[64], *v = NULL;
    snprintf(key, sizeof key, "a%d/progress/%d", job->attempt, r);
    if (ds_store_server_get(job->store, key, &v, NULL) != 1) return;
    ds_rank_progress *p = &job->ranks[r].progress;
    long long seq, step, op_ms;
    int off = 0;
    if (sscanf(v, "%lld %lld %lld %n", &seq, &step, &op_ms, &off) >= 3) {
        if (!p->reported || seq != p->seq) p->seq = seq, p->seq_ms = now;
        if (!p->reported || step != p->step) p->step = step, p->step_ms = now;
        p->op_ms = op_ms;
        snprintf(p->op, sizeof p->op, "%s", v + off);
        p->reported = 1;
    }
    free(v);
}

void ds_job_note_resumed(ds_job *job) {
    char key[64], *v = NULL;
    if (job->resumed_step >= 0) return;
    snprintf(key, sizeof key, "a%d/resumed", job->attempt);
    if (ds_store_server_get(job->store, key, &v, NULL) != 1) return;
    job->resumed_step = strtoll(v, NULL, 10);
    free(v);
    ds_json *j = ds_event_begin(job->ev, "resumed");
    if (j) {
        ds_json_kint(j, "attempt", job->attempt);
        ds_json_kint(j, "step", job->resumed_step);
    }
    ds_event_end(job->ev, "attempt %d resumed at step %lld", job->attempt, job->resumed_step);
}

/* Appends to buf (cap) without overflowing it. */
static void add(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t cap, const char *fmt, ...) {
    size_t len = strlen(buf);
    if (len + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

/* The stuck ranks in words: each cause on its own, the waiting ones grouped. */
static void describe_hang(ds_job *job, const int *stuck, int nstuck, long long now, int silent_ms) {
    ds_failure *h = &job->hang;
    const char *host;
    int cause = -1, nwait = 0;
    char waiting[400] = "";
    snprintf(h->what, sizeof h->what, "hang: no step progress for %.1f s:",
             (double)job->spec->hang_timeout_ms / 1000);
    for (int i = 0; i < nstuck; i++) {
        int r = stuck[i];
        const ds_rank_progress *p = &job->ranks[r].progress;
        host = job->plan->nodes[job->plan->ranks[r].node_rank].host;
        char at[48] = "before its first step";
        if (p->reported && p->step >= 0) snprintf(at, sizeof at, "at step %lld", p->step);
        if (p->reported && now - p->seq_ms > silent_ms) {
            add(h->what, sizeof h->what, " rank %d (%s) %s stopped reporting %.1f s ago%s%s;", r, host, at,
                (double)(now - p->seq_ms) / 1000, p->op[0] ? ", last seen in " : "", p->op);
        } else if (!p->reported || p->step < 0) {
            add(h->what, sizeof h->what, " rank %d (%s) never reached a step;", r, host);
        } else if (!p->op[0]) {
            add(h->what, sizeof h->what, " rank %d (%s) at step %lld is not in a collective;", r, host, p->step);
        } else {
            if (nwait++ < 8) add(waiting, sizeof waiting, "%s%d", nwait > 1 ? ", " : "", r);
            continue;
        }
        if (cause < 0) cause = r;
    }
    if (nwait) {
        /* every waiting rank names its collective: the first one's stands for all */
        const ds_rank_progress *p = NULL;
        for (int i = 0; i < nstuck && !p; i++)
            if (job->ranks[stuck[i]].progress.op[0]) p = &job->ranks[stuck[i]].progress;
        add(h->what, sizeof h->what, " rank%s %s%s at step %lld waiting in %s for %.1f s", nwait > 1 ? "s" : "", waiting,
            nwait > 8 ? " and more" : "", p->step, p->op, (double)p->op_ms / 1000);
        if (cause < 0) { /* all in collectives: the ones furthest behind hold the others up */
            cause = stuck[0];
            for (int i = 1; i < nstuck; i++)
                if (job->ranks[stuck[i]].progress.step < job->ranks[cause].progress.step) cause = stuck[i];
        }
    }
    size_t n = strlen(h->what);
    if (n && h->what[n - 1] == ';') h->what[n - 1] = 0;
    h->rank = cause;
    h->node = job->plan->ranks[cause].node_rank;
    h->at_ms = ds_wall_ms();
}

void ds_job_check_progress(ds_job *job) {
    if (job->stopping || !job->ranks) return;
    int interval = ds_rank_progress_interval_ms(job->spec);
    long long now = ds_now_ms();
    ds_job_note_resumed(job);
    if (!interval) return;
    int world = job->plan->world_size, started = 0;
    for (int r = 0; r < world; r++)
        if (job->ranks[r].state == DS_RANK_RUNNING) read_report(job, r, now);
    /* The clock starts at the first step any rank reports: setup has its own timeouts. */
    for (int r = 0; r < world; r++) started |= job->ranks[r].progress.reported && job->ranks[r].progress.step >= 0;
    if (!started) return;
    int *stuck = calloc((size_t)world, sizeof *stuck), nstuck = 0;
    if (!stuck) return;
    long long first_step_ms = now;
    for (int r = 0; r < world; r++) {
        const ds_rank_progress *p = &job->ranks[r].progress;
        if (p->reported && p->step >= 0 && p->step_ms < first_step_ms) first_step_ms = p->step_ms;
    }
    /* Once one rank is overdue, every rank that is not moving now belongs in the story
     * (a rank waiting for the stuck one may have started waiting a moment later). */
    int overdue = 0;
    for (int r = 0; r < world; r++) {
        const ds_rank_progress *p = &job->ranks[r].progress;
        if (job->ranks[r].state != DS_RANK_RUNNING) continue;
        long long since = p->reported && p->step >= 0 ? p->step_ms : first_step_ms;
        if (now - since >= job->spec->hang_timeout_ms) overdue = 1;
        if (now - since >= 2 * interval) stuck[nstuck++] = r;
    }
    if (overdue) {
        describe_hang(job, stuck, nstuck, now, 2 * interval + 250);
        ds_json *j = ds_event_begin(job->ev, "hang");
        if (j) {
            ds_json_kint(j, "attempt", job->attempt);
            ds_json_kint(j, "rank", job->hang.rank);
            ds_json_kstr(j, "what", job->hang.what);
        }
        ds_event_end(job->ev, "%s", job->hang.what);
        ds_job_stop(job, "%s", job->hang.what);
    }
    free(stuck);
}
