/* relay.h, the controller's side: which nodes go through which relay, starting the
 * relays and ending them, from the controller's thread; relay_link.c serves them
 * meanwhile. */
#include "relay.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include "job.h"
#include "relay_opts.h"
#include "relay_set.h"
#include "ds_signals.h"
#include "ssh_target.h"

int ds_relay_wanted(const ds_job *job) {
    const ds_jobspec *s = job->spec;
    return s->relay_threshold > 0 && job->plan->nnodes > s->relay_threshold && s->launch_method != DS_LAUNCH_SRUN;
}

/* Nodes per relay: [launch] relay_fanout, else ⌈√N⌉ (so ~√N relays of ~√N nodes). */
static int fanout(const ds_job *job) {
    if (job->spec->relay_fanout > 0) return job->spec->relay_fanout;
    int n = job->plan->nnodes, f = 1;
    while (f * f < n) f++;
    return f;
}

static ds_relay_set *set_new(ds_job *job, ds_err *err) {
    ds_relay_set *set = calloc(1, sizeof *set);
    int nn = job->plan->nnodes, f = fanout(job);
    if (set) {
        set->fanout = f;
        set->nodes = calloc((size_t)nn, sizeof *set->nodes);
        set->links = calloc((size_t)((nn + f - 1) / f), sizeof *set->links);
    }
    if (!set || !set->nodes || !set->links) {
        if (set) free(set->nodes), free(set->links);
        free(set);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    set->wake[0] = set->wake[1] = -1;
    return set;
}

int ds_relay_attach(ds_job *job, ds_node *n, ds_err *err) {
    if (!job->relays && !(job->relays = set_new(job, err))) return -1;
    ds_relay_set *set = job->relays;
    int far[3];
    if (ds_node_start_piped(n, far, err) != 0) return -1;
    int k = set->nnodes++;
    set->nodes[k] = (relayed_node){.index = (int)(n - job->nodes), .link = k / set->fanout, .in_r = far[0],
                                   .out_w = far[1], .err_w = far[2]};
    return 0;
}

/* ---- launch ---- */

static int config(ds_buf *b, const char *key, const char *val) {
    char kv[4300];
    int n = snprintf(kv, sizeof kv, "%s=%s", key, val);
    return n > 0 && (size_t)n < sizeof kv ? ds_frame_append(b, DS_FRAME_CONFIG, 0, kv, (size_t)n) : -1;
}

/* The command that runs an agent (as controller.c's start_node runs it over SSH). */
static char *agent_command(const ds_job *job, int node) {
    char *dsrun = ds_shell_quote(job->spec->dsrun), *id = ds_shell_quote(job->id), *cmd = NULL;
    if (!dsrun || !id || asprintf(&cmd, "exec %s agent --job %s --node %d", dsrun, id, node) < 0) cmd = NULL;
    free(dsrun);
    free(id);
    return cmd;
}

/* ssh_config: read when the first SSH target is needed. */
static int ssh_target(const ds_job *job, const ds_plan_node *pn, ds_ssh_config **cfg, ds_ssh_opts *o, ds_err *err) {
    if (!*cfg && !(*cfg = ds_ssh_config_for(job->spec, err))) return -1;
    return ds_ssh_target(job->spec, *cfg, pn->alias ? pn->alias : pn->host, o, err);
}

/* 1 when the relay on `relay` starts node pn by fork/exec (its own machine). */
static int local_to(const ds_job *job, const ds_plan_node *relay, const ds_plan_node *pn) {
    if (job->spec->ssh_force) return 0;
    return relay->local ? pn->local : !strcmp(pn->host, relay->host);
}

/* What the relay is told: its settings, how to start each node, GO. */
static int queue_relay(ds_job *job, relay_link *l, ds_ssh_config **cfg, ds_err *err) {
    ds_relay_set *set = job->relays;
    ds_buf *b = &l->node.to_agent;
    char num[32];
    int bad = config(b, "dsrun", job->spec->dsrun) | config(b, "job", job->id);
    snprintf(num, sizeof num, "%d", job->spec->max_handshakes);
    bad |= config(b, "max_handshakes", num);
    snprintf(num, sizeof num, "%d", set->grace_ms);
    bad |= config(b, "grace_ms", num);
    for (int k = l->first; k < l->first + l->count && !bad; k++) {
        int i = set->nodes[k].index;
        const ds_plan_node *pn = &job->plan->nodes[i];
        if (local_to(job, &l->where, pn)) {
            bad |= ds_frame_append(b, DS_FRAME_RELAY_NODE, (uint32_t)i, "local", 5);
            continue;
        }
        ds_ssh_opts o;
        if (ssh_target(job, pn, cfg, &o, err) != 0) return ds_err_prefix(err, "node %d (%s)", i, pn->host);
        ds_buf p = {0};
        char *cmd = agent_command(job, i);
        bad |= !cmd || ds_relay_opts_put(&p, &o, cmd) != 0 ||
               ds_frame_append(b, DS_FRAME_RELAY_NODE, (uint32_t)i, ds_buf_head(&p), ds_buf_unread(&p)) != 0;
        free(cmd);
        ds_buf_free(&p);
        ds_ssh_opts_free(&o);
    }
    bad |= ds_frame_append(b, DS_FRAME_GO, 0, NULL, 0);
    return bad ? ds_err_set(err, "out of memory (or a newline in an SSH setting)") : 0;
}

/* This very program: relays run the same dslaunch (installed at the same path on every
 * node, as dsrun is). */
static int self_exe(char *path, size_t cap, ds_err *err) {
    ssize_t n = readlink("/proc/self/exe", path, cap - 1);
    if (n <= 0) return ds_err_errno(err, errno, "readlink /proc/self/exe");
    path[n] = 0;
    return 0;
}

static int start_relay(ds_job *job, relay_link *l, ds_ssh_config **cfg, ds_err *err) {
    char exe[4096];
    if (self_exe(exe, sizeof exe, err) != 0) return -1;
    const ds_plan_node *first = &job->plan->nodes[job->relays->nodes[l->first].index];
    if (first->local && !job->spec->ssh_force) {
        char *argv[] = {exe, "--relay", "--job", job->id, NULL};
        if (ds_node_start_local(&l->node, argv, err) != 0) return -1;
        l->pidfd = pidfd_open(l->node.local.pid, 0); /* -1 on old kernels: looked at every second */
        return 0;
    }
    ds_ssh_opts o;
    char *q = ds_shell_quote(exe), *id = ds_shell_quote(job->id), *cmd = NULL;
    if (!q || !id || asprintf(&cmd, "exec %s --relay --job %s", q, id) < 0) cmd = NULL;
    free(q);
    free(id);
    if (!cmd) return ds_err_set(err, "out of memory");
    int rc = ssh_target(job, first, cfg, &o, err) == 0 ? ds_node_start_ssh(&l->node, &o, cmd, err) : -1;
    free(cmd);
    return rc;
}

static int start_thread(ds_relay_set *set, ds_err *err) {
    if (pipe2(set->wake, O_CLOEXEC | O_NONBLOCK) != 0) return ds_err_errno(err, errno, "pipe");
    int rc = ds_signals_thread(&set->thread, ds_relay_serve, set);
    if (rc != 0) return ds_err_errno(err, rc, "starting the relays' thread");
    set->thread_started = 1;
    return 0;
}

static void fail_link(ds_relay_set *set, relay_link *l, const char *fmt, const char *detail) {
    char why[1400];
    snprintf(why, sizeof why, fmt, detail);
    for (int k = l->first; k < l->first + l->count; k++) ds_relay_end_node(&set->nodes[k], why);
    l->lost_told = 1;
}

void ds_relay_launch(ds_job *job) {
    ds_relay_set *set = job->relays;
    if (!set) return;
    set->grace_ms = DS_STOP_GRACE_MS;
    set->nlinks = (set->nnodes + set->fanout - 1) / set->fanout;
    ds_event(job->ev, "relays: %d nodes through %d relays of up to %d nodes ([launch] relay_threshold %d)",
             set->nnodes, set->nlinks, set->fanout, job->spec->relay_threshold);
    ds_ssh_config *cfg = NULL;
    for (int r = 0; r < set->nlinks; r++) {
        relay_link *l = &set->links[r];
        l->first = r * set->fanout;
        l->count = set->nnodes - l->first < set->fanout ? set->nnodes - l->first : set->fanout;
        l->where = job->plan->nodes[set->nodes[l->first].index];
        l->node.plan = &l->where;
        l->node.local.in_fd = l->node.local.out_fd = l->node.local.err_fd = -1;
        l->pidfd = -1;
        ds_err err = {""};
        int a = set->nodes[l->first].index, z = set->nodes[l->first + l->count - 1].index;
        if (queue_relay(job, l, &cfg, &err) != 0 || start_relay(job, l, &cfg, &err) != 0) {
            ds_event(job->ev, "relay %d on %s (nodes %d-%d): cannot start: %s", r, l->where.host, a, z, err.msg);
            fail_link(set, l, "its relay could not start: %s", err.msg);
            l->node.state = DS_NODE_DONE;
            continue;
        }
        if (l->node.via_ssh)
            ds_event(job->ev, "relay %d on %s (nodes %d-%d): connecting over SSH", r, l->where.host, a, z);
        else
            ds_event(job->ev, "relay %d on %s (nodes %d-%d): started locally, pid %d", r, l->where.host, a, z,
                     (int)l->node.local.pid);
    }
    ds_ssh_config_free(cfg);
    ds_err err = {""};
    if (start_thread(set, &err) == 0) return;
    ds_event(job->ev, "relays: %s", err.msg);
    for (int r = 0; r < set->nlinks; r++) {
        if (!set->links[r].lost_told) fail_link(set, &set->links[r], "its relay could not be served: %s", err.msg);
        ds_node_abandon(&set->links[r].node, NULL);
    }
}

/* ---- teardown ---- */

void ds_relay_free(ds_job *job) {
    ds_relay_set *set = job->relays;
    if (!set) return;
    if (set->thread_started) {
        /* The thread closes every relay's stdin and waits for them (relay_set.h). */
        ssize_t ignored = write(set->wake[1], "x", 1);
        (void)ignored;
        pthread_join(set->thread, NULL);
    }
    for (int r = 0; r < set->nlinks; r++) {
        relay_link *l = &set->links[r];
        if (l->node.state != DS_NODE_DONE)
            ds_event(job->ev, "relay %d on %s: did not end when asked: %s", r, l->where.host,
                     l->node.via_ssh ? "dropped (it stops its nodes when it sees its stdin close)" : "killed");
        ds_node_free(&l->node);
        if (l->pidfd >= 0) close(l->pidfd);
    }
    for (int k = 0; k < set->nnodes; k++) ds_relay_end_node(&set->nodes[k], NULL);
    if (set->wake[0] >= 0) close(set->wake[0]), close(set->wake[1]);
    free(set->nodes);
    free(set->links);
    free(set);
    job->relays = NULL;
}
