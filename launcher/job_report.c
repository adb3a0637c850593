/* What agents report, applied to the job: ranks started and exited, output to the logs,
 * node errors. A rank that fails, or a node that errs or vanishes, stops the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "srun.h"
#include "ds_clock.h"

static int node_index(const ds_job *job, const ds_node *n) { return (int)(n - job->nodes); }

/* A frame may only speak of the ranks of the node that sent it. */
static int rank_of_node(const ds_job *job, const ds_node *n, uint32_t r) {
    return r < (uint32_t)job->plan->world_size && job->plan->ranks[r].node_rank == n->plan->node_rank;
}

static void text(const ds_frame *f, char *buf, size_t cap) {
    size_t n = f->len < cap - 1 ? f->len : cap - 1;
    memcpy(buf, f->payload, n);
    buf[n] = 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)buf[i] < 32) buf[i] = ' ';
}

/* "exit N at T" / "signal N at T" (T: the agent's wall clock, ms). */
static void rank_exited(ds_job *job, ds_node *n, int r, const char *how) {
    ds_rank_status *rs = &job->ranks[r];
    if (rs->state == DS_RANK_EXITED) return;
    int v = 0;
    long long at = 0;
    if (sscanf(how, "signal %d at %lld", &v, &at) >= 1) rs->sig = v;
    else if (sscanf(how, "exit %d at %lld", &v, &at) >= 1) rs->code = v;
    else rs->code = 255;
    rs->ended_ms = at;
    rs->state = DS_RANK_EXITED;
    rs->after_stop = job->stopping;
    job->nexited++;
    ds_logs_end_rank(job->logs, r);
    ds_event(job->ev, "rank %d on %s: %s", r, n->plan->host, how);
    if (rs->code == 0 && rs->sig == 0) {
        if (job->nexited == job->plan->world_size && !job->stopping)
            ds_event(job->ev, "all %d ranks exited 0", job->plan->world_size);
        return;
    }
    if (!rs->after_stop) job->nfailed_ranks++;
    ds_json *j = ds_event_begin(job->ev, "rank_failed");
    if (j) {
        ds_json_kint(j, "attempt", job->attempt);
        ds_json_kint(j, "rank", r);
        ds_json_kstr(j, "host", n->plan->host);
        if (rs->sig) ds_json_kint(j, "signal", rs->sig);
        else ds_json_kint(j, "exit_code", rs->code);
        if (rs->rec.kind[0]) {
            ds_json_kstr(j, "error", rs->rec.message);
            ds_json_kbool(j, "after_comm_broke", rs->rec.transport);
        }
        ds_json_kbool(j, "while_stopping", rs->after_stop);
    }
    ds_event_end(job->ev, "rank %d on %s failed: %s", r, n->plan->host, rs->rec.kind[0] ? rs->rec.message : how);
    if (job->stopping) return;
    if (rs->sig) ds_job_stop(job, "rank %d on %s was killed by signal %d (%s)", r, n->plan->host, rs->sig, strsignal(rs->sig));
    else ds_job_stop(job, "rank %d on %s exited with code %d", r, n->plan->host, rs->code);
}

static void rank_record(ds_job *job, ds_node *n, int r, const ds_frame *f) {
    ds_rank_status *rs = &job->ranks[r];
    ds_err err = {{0}};
    ds_failure_record_free(&rs->rec);
    if (ds_failure_record_parse(&rs->rec, f->payload, f->len, &err) != 0) {
        ds_event(job->ev, "rank %d on %s: unreadable failure record: %s", r, n->plan->host, err.msg);
        return;
    }
    ds_event(job->ev, "rank %d on %s: %s error%s: %s", r, n->plan->host, rs->rec.kind,
             rs->rec.transport ? " (after its communicator broke)" : "", rs->rec.message);
}

void ds_job_on_frame(void *ctx, ds_node *n, const ds_frame *f) {
    ds_job *job = ctx;
    char buf[1024];
    int r = (int)f->rank;
    int needs_rank = f->type == DS_FRAME_STARTED || f->type == DS_FRAME_STDOUT ||
                     f->type == DS_FRAME_STDERR || f->type == DS_FRAME_EXIT || f->type == DS_FRAME_FAILURE ||
                     f->type == DS_FRAME_METRICS;
    if (needs_rank && !rank_of_node(job, n, f->rank)) {
        ds_job_stop(job, "node %d (%s): the agent spoke of rank %u, which is not on that node",
                    node_index(job, n), n->plan->host, f->rank);
        return;
    }
    switch (f->type) {
    case DS_FRAME_HELLO: { /* "pid\ncgroup PATH" or "pid\nsubreaper (why)" */
        snprintf(buf, sizeof buf, "%.*s", (int)(f->len < sizeof buf - 1 ? f->len : sizeof buf - 1),
                 (const char *)f->payload);
        n->state = DS_NODE_RUNNING;
        n->agent_pid = atoi(buf);
        const char *track = strchr(buf, '\n');
        if (track && !strncmp(track + 1, "cgroup ", 7)) snprintf(n->cgroup, sizeof n->cgroup, "%s", track + 8);
        ds_event(job->ev, "node %d (%s): agent up, pid %d; the ranks' descendants tracked by %s", node_index(job, n),
                 n->plan->host, n->agent_pid, track ? track + 1 : "their process groups");
        break;
    }
    case DS_FRAME_STARTED:
        text(f, buf, sizeof buf);
        job->ranks[r].state = DS_RANK_RUNNING;
        job->ranks[r].pid = (pid_t)atoi(buf);
        ds_event(job->ev, "rank %d on %s: started, pid %s", r, n->plan->host, buf);
        if (++job->nstarted == job->plan->world_size) {
            job->all_started_ms = ds_now_ms();
            ds_event(job->ev, "all %d ranks started (%.3f s)", job->nstarted,
                     (double)(job->all_started_ms - job->t0_ms) / 1000);
        }
        break;
    case DS_FRAME_STDOUT:
    case DS_FRAME_STDERR:
        ds_logs_write(job->logs, r, f->type == DS_FRAME_STDOUT ? 1 : 2, f->payload, f->len);
        break;
    case DS_FRAME_FAILURE:
        rank_record(job, n, r, f);
        break;
    case DS_FRAME_EXIT:
        text(f, buf, sizeof buf);
        rank_exited(job, n, r, buf);
        break;
    case DS_FRAME_ERROR:
        text(f, buf, sizeof buf);
        ds_job_node_failed(job, n, buf);
        ds_event(job->ev, "node %d (%s): agent error: %s", node_index(job, n), n->plan->host, buf);
        ds_job_stop(job, "node %d (%s): %s", node_index(job, n), n->plan->host, buf);
        break;
    case DS_FRAME_BYE:
        n->bye = 1;
        break;
    case DS_FRAME_SIGNAL:
        ds_srun_on_signal(job, n, f);
        break;
    case DS_FRAME_METRICS:
        ds_monitor_feed(job->monitor, r, f->payload, f->len);
        break;
    default:
        ds_job_stop(job, "node %d (%s): unexpected frame type %d from the agent", node_index(job, n),
                    n->plan->host, f->type);
    }
}

void ds_job_on_agent_line(void *ctx, ds_node *n, const char *line) {
    ds_job *job = ctx;
    if (!line[0]) return;
    ds_event(job->ev, "node %d (%s) agent: %s", node_index(job, n), n->plan->host, line);
    /* Stopping chatter is for launcher.log; anything else the user should see. */
    if (job->stopping) return;
    ds_monitor_terminal(job->monitor, 1);
    fprintf(stderr, "[%s:agent] %s\n", n->plan->host, line);
    ds_monitor_terminal(job->monitor, 0);
}

void ds_job_on_node_done(ds_job *job, ds_node *n) {
    int idx = node_index(job, n);
    int missing = 0;
    for (int r = 0; r < job->plan->world_size; r++) {
        if (job->plan->ranks[r].node_rank != n->plan->node_rank) continue;
        if (job->ranks[r].state == DS_RANK_EXITED) continue;
        missing++;
        ds_logs_end_rank(job->logs, r);
    }
    ds_event(job->ev, "node %d (%s): agent gone%s%s", idx, n->plan->host, n->failed ? ": " : "",
             n->failed ? n->error : "");
    if (!n->failed && missing) {
        char why[128];
        snprintf(why, sizeof why, "the agent ended with %d rank(s) unreported", missing);
        ds_job_node_failed(job, n, why);
    }
    if (n->failed) ds_job_stop(job, "node %d (%s): %s", idx, n->plan->host, n->error);
}

void ds_job_kill_node(ds_job *job, ds_node *n) {
    if (job->stopping && !n->failed) n->stop_kill = 1; /* what follows is our doing */
    /* kill -KILL AGENT -RANKGROUP...: every rank leads its own process group. Without
     * cgroups, the ranks that can still run sweep their own descendants when their agent
     * dies (their lifelines): their groups are killed a moment later, for those that
     * cannot (stopped ones). */
    char cmd[8192];
    int len = snprintf(cmd, sizeof cmd, "kill -KILL -- %d%s", n->agent_pid, n->cgroup[0] ? "" : "; sleep 0.5; kill -KILL --");
    for (int r = 0; r < job->plan->world_size && len < (int)sizeof cmd - 32; r++) {
        const ds_rank_status *rs = &job->ranks[r];
        if (job->plan->ranks[r].node_rank == n->plan->node_rank && rs->state == DS_RANK_RUNNING && rs->pid > 0)
            len += snprintf(cmd + len, sizeof cmd - (size_t)len, " -%d", (int)rs->pid);
    }
    if (n->cgroup[0] && len < (int)sizeof cmd - 64 - (int)strlen(n->cgroup) * 2) {
        /* and whatever left the ranks' groups: their cgroups (each rank-R under the node's) */
        char *q = ds_shell_quote(n->cgroup);
        if (q) len += snprintf(cmd + len, sizeof cmd - (size_t)len, "; for f in %s/rank-*/cgroup.kill; do echo 1 > \"$f\"; done", q);
        free(q);
    }
    if (n->via_ssh && n->agent_pid <= 0) {
        ds_node_abandon(n, "did not stop, and its agent never said hello");
        ds_job_on_node_done(job, n);
        return;
    }
    ds_event(job->ev, "node %d (%s): killing its agent and ranks%s%s", node_index(job, n), n->plan->host,
             n->via_ssh ? " over a second channel: " : "", n->via_ssh ? cmd : "");
    ds_node_kill_hard(n, cmd);
}
