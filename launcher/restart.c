#include "restart.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "replan.h"
#include "ssh_target.h"

/* Hostfile names that ~/.ssh/config gives a HostName stand for that address again in a
 * new plan (as main.c does for the first); master_given: MASTER_ADDR is the user's. */
static int resolve_aliases(ds_plan *plan, const ds_jobspec *spec, int master_given, ds_err *err) {
    if (spec->launch_method != DS_LAUNCH_SSH || !spec->hostfile) return 0;
    ds_ssh_config *cfg = ds_ssh_config_for(spec, err);
    if (!cfg) return -1;
    int rc = ds_plan_apply_ssh_config(plan, spec, cfg, master_given, err);
    ds_ssh_config_free(cfg);
    return rc;
}

void ds_restart_init(ds_restart *rs, const ds_jobspec *spec, const ds_plan *plan) {
    memset(rs, 0, sizeof *rs);
    rs->spec = spec;
    rs->run_spec = *spec;
    rs->plan = plan;
    rs->world0 = plan->world_size;
}

void ds_restart_free(ds_restart *rs) {
    ds_plan_free(&rs->plans[0]);
    ds_plan_free(&rs->plans[1]);
    for (int i = 0; i < rs->nhosts; i++) free(rs->hosts[i].host);
    free(rs->hosts);
    rs->hosts = NULL;
    rs->nhosts = 0;
}

static long long backoff(const ds_restart *rs) {
    long long ms = rs->spec->backoff_ms;
    for (int i = 0; i < rs->restarts && ms < rs->spec->backoff_max_ms; i++) ms *= 2;
    return ms < rs->spec->backoff_max_ms ? ms : rs->spec->backoff_max_ms;
}

static ds_host_record *host_record(ds_restart *rs, const char *host) {
    for (int i = 0; i < rs->nhosts; i++)
        if (!strcmp(rs->hosts[i].host, host)) return &rs->hosts[i];
    ds_host_record *h = realloc(rs->hosts, (size_t)(rs->nhosts + 1) * sizeof *h);
    if (!h) return NULL;
    rs->hosts = h;
    h = &rs->hosts[rs->nhosts];
    memset(h, 0, sizeof *h);
    if (!(h->host = strdup(host))) return NULL;
    rs->nhosts++;
    return h;
}

static void note(ds_restart *rs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(ds_restart *rs, const char *fmt, ...) {
    size_t len = strlen(rs->note);
    va_list ap;
    va_start(ap, fmt);
    if (len + 1 < sizeof rs->note) vsnprintf(rs->note + len, sizeof rs->note - len, fmt, ap);
    va_end(ap);
}

/* Counts the attempt's node failures; returns how many nodes it newly excluded. */
static int account_nodes(ds_restart *rs, const ds_job *job) {
    int excluded = 0;
    for (int i = 0; i < job->plan->nnodes; i++) {
        const ds_node *n = &job->nodes[i];
        if (!n->failed || n->stop_kill) continue; /* dslaunch's own kill says nothing of the node */
        ds_host_record *h = host_record(rs, n->plan->host);
        if (!h || h->excluded) continue;
        h->failures++;
        int never_up = n->agent_pid <= 0; /* unreachable, or its agent could not start */
        if (!never_up && h->failures < rs->spec->node_retries) continue;
        h->excluded = 1;
        if (never_up) snprintf(h->why, sizeof h->why, "could not be started: %.250s", n->error);
        else snprintf(h->why, sizeof h->why, "failed %d time%s ([restart] node_retries = %d), last: %.200s",
                      h->failures, h->failures == 1 ? "" : "s", rs->spec->node_retries, n->error);
        note(rs, "node %s excluded: %s\n", h->host, h->why);
        ds_json *j = ds_event_begin(job->ev, "node_excluded");
        if (j) {
            ds_json_kstr(j, "host", h->host);
            ds_json_kint(j, "failures", h->failures);
            ds_json_kstr(j, "why", h->why);
        }
        ds_event_end(job->ev, "node %s excluded: %s", h->host, h->why);
        excluded++;
    }
    return excluded;
}

/* Keeps the global batch when the world changes: grad_accum x world stays the same when
 * it divides; otherwise says what the global batch becomes. */
static void adjust_accum(ds_restart *rs) {
    int world = rs->plan->world_size;
    long long global = (long long)rs->spec->engine.grad_accum * rs->world0;
    int old = (int)rs->run_spec.engine.grad_accum;
    if (global % world == 0) {
        rs->run_spec.engine.grad_accum = (int)(global / world);
    } else {
        rs->run_spec.engine.grad_accum = (int)((global + world - 1) / world);
        note(rs, "the global batch changes from %lld to %lld micro-batches (%lld does not divide over %d ranks)\n",
             global, (long long)rs->run_spec.engine.grad_accum * world, global, world);
    }
    if (rs->run_spec.engine.grad_accum != old)
        note(rs, "grad_accum %d -> %lld for %d ranks (global batch: micro_batch x %lld)\n", old,
             (long long)rs->run_spec.engine.grad_accum, world, (long long)rs->run_spec.engine.grad_accum * world);
}

/* A plan without the excluded nodes; 0, or -1 when the job cannot go on. */
static int replan(ds_restart *rs) {
    char **names = calloc((size_t)rs->nhosts + 1, sizeof *names);
    int n = 0;
    if (!names) return -1;
    for (int i = 0; i < rs->nhosts; i++)
        if (rs->hosts[i].excluded) names[n++] = rs->hosts[i].host;
    ds_plan *next = &rs->plans[rs->next_plan];
    ds_plan_free(next);
    char what[1024] = "";
    ds_err err = {{0}};
    int master_given = strcmp(rs->plan->master_addr, rs->plan->nodes[0].host) != 0;
    int rc = ds_replan(next, rs->plan, names, n, rs->spec->min_nodes, what, sizeof what, &err);
    if (rc == 0) rc = resolve_aliases(next, rs->spec, master_given, &err);
    free(names);
    if (rc != 0) {
        note(rs, "cannot go on: %s\n", err.msg);
        return -1;
    }
    note(rs, "%s", what);
    if (next->nnodes < rs->plan->nnodes)
        note(rs, "continuing on %d node%s, %d ranks (was %d nodes, %d ranks)\n", next->nnodes,
             next->nnodes == 1 ? "" : "s", next->world_size, rs->plan->nnodes, rs->plan->world_size);
    rs->plan = next;
    rs->next_plan ^= 1;
    adjust_accum(rs);
    return 0;
}

int ds_restart_next(ds_restart *rs, const ds_job *job, long long *wait_ms, ds_end *end) {
    *wait_ms = 0;
    rs->note[0] = 0;
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
    if (account_nodes(rs, job) > 0 && replan(rs) != 0) return 0;
    *wait_ms = backoff(rs);
    rs->restarts++;
    return 1;
}
