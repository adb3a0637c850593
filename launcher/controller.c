/* The controller's run of a job (controller.h): sets up the logs and the store, starts
 * every node's agent at once (fork/exec locally, SSH elsewhere), then one poll loop
 * serves them all until every agent is gone, and prints the summary. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "controller.h"
#include "fd_budget.h"
#include "job.h"
#include "srun.h"
#include "start_queue.h"
#include "ssh_target.h"
#include "ds_clock.h"
#include "ds_signals.h"

/* ---- setup ---- */

static int make_job_id(ds_job *job, ds_err *err) {
    unsigned char r[4];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) return ds_err_errno(err, errno, "getrandom");
    snprintf(job->id, sizeof job->id, "%s-%02x%02x%02x%02x", job->spec->name, r[0], r[1], r[2], r[3]);
    return 0;
}

static int make_log_dirs(ds_job *job, ds_err *err) {
    const ds_jobspec *s = job->spec;
    const char *dir = s->log_dir ? s->log_dir : "logs";
    int rc = dir[0] == '/' ? asprintf(&job->log_root, "%s/%s", dir, s->name)
                           : asprintf(&job->log_root, "%s/%s/%s", s->workdir, dir, s->name);
    if (rc < 0 || asprintf(&job->attempt_dir, "%s/attempt-%d", job->log_root, job->attempt) < 0)
        return ds_err_set(err, "out of memory");
    job->logs = ds_logs_open(job->attempt_dir, job->plan, s->tee, err); /* creates the dirs */
    if (!job->logs) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/launcher.log", job->log_root);
    job->ev = ds_events_open(path, err);
    return job->ev ? 0 : -1;
}

static int start_store(ds_job *job, ds_err *err) {
    const char *addr = job->spec->rdzv_addr ? job->spec->rdzv_addr : job->plan->master_addr;
    if (ds_store_make_token(job->token, err) != 0) return -1;
    if (ds_store_server_start(addr, job->spec->rdzv_port, job->token, &job->store, err) != 0)
        return ds_err_prefix(err, "rendezvous store on %s", addr);
    snprintf(job->rdzv, sizeof job->rdzv, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr,
             ds_store_server_port(job->store));
    ds_event(job->ev, "job %s: store listening on %s", job->id, job->rdzv);
    return 0;
}

/* ---- what each agent is told on its stdin ---- */

static int config(ds_buf *b, const char *key, const char *val) {
    char *kv;
    if (asprintf(&kv, "%s=%s", key, val) < 0) return -1;
    int rc = ds_frame_append(b, DS_FRAME_CONFIG, 0, kv, strlen(kv));
    memset(kv, 0, strlen(kv));
    free(kv);
    return rc;
}

static int config_int(ds_buf *b, const char *key, int v) {
    char s[32];
    snprintf(s, sizeof s, "%d", v);
    return config(b, key, s);
}

static int queue_plan(ds_job *job, ds_node *n, ds_err *err) {
    const ds_jobspec *s = job->spec;
    ds_buf *b = &n->to_agent;
    int bad = config(b, "job", job->id) | config(b, "host", n->plan->host) |
              config_int(b, "node", n->plan->node_rank) | config(b, "rdzv", job->rdzv) |
              config(b, "token", job->token) | config(b, "workdir", s->workdir) |
              config(b, "script", s->script) | config_int(b, "heartbeat_ms", s->heartbeat_interval_ms) |
              config_int(b, "grace_ms", DS_STOP_GRACE_MS) | config_int(b, "rdzv_timeout_ms", s->rdzv_timeout_ms);
    for (int i = 0; i < s->nargs; i++) bad |= config(b, "arg", s->args[i]);
    bad |= config(b, "kind", ds_jobspec_is_lua(s) ? "lua" : "program") |
           config_int(b, "attempt", job->attempt) | config_int(b, "master_port", job->plan->master_port);
    for (int i = 0; i < s->ninterp; i++) bad |= config(b, "interp", s->interpreter[i]);
    if (s->local_rank_arg) bad |= config_int(b, "local_rank_arg", 1);
    for (int r = 0; r < job->plan->world_size && !bad; r++) {
        if (job->plan->ranks[r].node_rank != n->plan->node_rank) continue;
        bad |= ds_frame_append(b, DS_FRAME_RANK, (uint32_t)r, NULL, 0);
        char **env = ds_plan_rank_env(job->plan, s, r, job->id, job->attempt);
        if (!env) return ds_err_set(err, "out of memory");
        for (char **e = env; *e; e++) bad |= ds_frame_append(b, DS_FRAME_ENV, (uint32_t)r, *e, strlen(*e));
        ds_plan_env_free(env);
    }
    bad |= ds_frame_append(b, DS_FRAME_GO, 0, NULL, 0);
    return bad ? ds_err_set(err, "out of memory (or an [env] value over 1 MiB)") : 0;
}

/* ---- starting the nodes ---- */

/* Single quotes for the remote shell. */
static char *shell_quote(const char *s) {
    size_t n = 3;
    for (const char *p = s; *p; p++) n += *p == '\'' ? 4 : 1;
    char *q = malloc(n), *o = q;
    if (!q) return NULL;
    *o++ = '\'';
    for (const char *p = s; *p; p++) {
        if (*p == '\'') {
            memcpy(o, "'\\''", 4);
            o += 4;
        } else {
            *o++ = *p;
        }
    }
    *o++ = '\'';
    *o = 0;
    return q;
}

/* ssh_config: read when the first node needs SSH (a local or srun job never reads it). */
static int start_node(ds_job *job, ds_node *n, ds_ssh_config **ssh_config, ds_err *err) {
    const ds_jobspec *s = job->spec;
    char node[16];
    snprintf(node, sizeof node, "%d", n->plan->node_rank);
    if (s->launch_method == DS_LAUNCH_SRUN) return ds_srun_attach(job, n, err);
    if (n->plan->local && !s->ssh_force) {
        char *argv[] = {s->dsrun, "agent", "--job", job->id, "--node", node, NULL};
        if (ds_node_start_local(n, argv, err) != 0) return -1;
        ds_event(job->ev, "node %d (%s): agent started locally, pid %d", n->plan->node_rank, n->plan->host,
                 (int)n->local.pid);
        return 0;
    }
    char *dsrun = shell_quote(s->dsrun), *id = shell_quote(job->id), *cmd = NULL;
    int ok = dsrun && id && asprintf(&cmd, "exec %s agent --job %s --node %s", dsrun, id, node) > 0;
    free(dsrun);
    free(id);
    if (!ok) return ds_err_set(err, "out of memory");
    ds_ssh_opts o;
    const char *name = n->plan->alias ? n->plan->alias : n->plan->host;
    if ((!*ssh_config && !(*ssh_config = ds_ssh_config_for(s, err))) ||
        ds_ssh_target(s, *ssh_config, name, &o, err) != 0) {
        free(cmd);
        return -1;
    }
    char how[1200];
    int len = snprintf(how, sizeof how, "%s@%s port %d", o.user, o.host, o.port);
    for (int i = 0; i < o.njumps && len > 0 && (size_t)len < sizeof how; i++)
        len += snprintf(how + len, sizeof how - (size_t)len, "%s%s@%s:%d", i ? "," : " via ",
                        o.jumps[i].user, o.jumps[i].host, o.jumps[i].port);
    int rc = ds_node_start_ssh(n, &o, cmd, err);
    free(cmd);
    if (rc == 0) ds_event(job->ev, "node %d (%s): connecting over SSH (%s)", n->plan->node_rank, n->plan->host, how);
    return rc;
}

/* Nodes waiting for a handshake slot start as slots free up (start_queue.h). */
static void start_queued(ds_job *job, ds_ssh_config **ssh_config) {
    ds_node *n;
    while ((n = ds_start_next(job))) {
        ds_err err = {{0}};
        if (start_node(job, n, ssh_config, &err) == 0) continue;
        snprintf(n->error, sizeof n->error, "%s", err.msg);
        n->failed = 1;
        n->state = DS_NODE_DONE;
        ds_job_stop(job, "node %d (%s): %s", n->plan->node_rank, n->plan->host, err.msg);
    }
}

/* ---- the loop ---- */

static int setup_signals(ds_err *err) {
    /* A shell starts background jobs with SIGINT ignored; dslaunch handles it itself. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, 0};
    return ds_signals_fd(sigs, err);
}

static void handle_signals(ds_job *job, int sigfd) {
    struct signalfd_siginfo si;
    while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            for (int i = 0; i < job->plan->nnodes; i++) ds_node_reap(&job->nodes[i]);
            continue;
        }
        if (!job->stopping) {
            job->interrupted = sig;
            ds_monitor_terminal(job->monitor, 1);
            fprintf(stderr, "dslaunch: %s: stopping every rank (again to kill at once)\n", sigabbrev_np(sig));
            ds_monitor_terminal(job->monitor, 0);
            ds_job_stop(job, "interrupted by SIG%s", sigabbrev_np(sig));
        } else if (job->interrupted) {
            ds_event(job->ev, "second SIG%s: killing every node now", sigabbrev_np(sig));
            job->kill_at_ms = 0;
        }
    }
}

static void handle_store_events(ds_job *job) {
    ds_store_event e;
    while (ds_store_server_next_event(job->store, &e) == 1) {
        switch (e.kind) {
        case DS_STORE_EV_NODE_CONNECTED:
            ds_event(job->ev, "store: node %d connected from %s", e.node_rank, e.peer);
            break;
        case DS_STORE_EV_NODE_LOST:
            ds_event(job->ev, "store: node %d connection closed (%s)", e.node_rank, e.reason);
            break;
        case DS_STORE_EV_CLIENT_REJECTED:
            ds_event(job->ev, "store: dropped client %s: %s", e.peer, e.reason);
            fprintf(stderr, "dslaunch: store: dropped a client from %s: %s\n", e.peer, e.reason);
            break;
        }
    }
}

/* A node whose agent stopped heartbeating is lost even if its SSH link looks alive. */
static void check_heartbeats(ds_job *job) {
    if (job->stopping || job->spec->heartbeat_timeout_ms <= 0) return;
    int64_t now = ds_now_ms();
    for (int i = 0; i < job->plan->nnodes; i++) {
        ds_node *n = &job->nodes[i];
        if (n->state != DS_NODE_RUNNING) continue;
        int64_t last = ds_store_server_last_heartbeat_ms(job->store, n->plan->node_rank);
        if (last < 0 || now - last <= job->spec->heartbeat_timeout_ms) continue;
        char why[128];
        snprintf(why, sizeof why, "no heartbeat for %.1f s", (double)(now - last) / 1000);
        ds_job_stop(job, "node %d (%s): %s", i, n->plan->host, why);
        /* It will not answer a polite stop: kill its agent and ranks now. */
        snprintf(n->error, sizeof n->error, "%s", why);
        n->failed = 1;
        ds_job_kill_node(job, n);
        return;
    }
}

static int poll_timeout(ds_job *job) {
    long long now = ds_now_ms(), wake = now + 1000;
    for (int i = 0; i < job->plan->nnodes; i++) {
        const ds_node *n = &job->nodes[i];
        long long d = ds_node_deadline_ms(n);
        if (d >= 0 && d < wake) wake = d;
        /* libssh2 can keep bytes it read in its own buffers, where poll cannot see them:
         * such a node is pending (ds_node_due) and the next pass comes at once. */
        if (n->pending && n->state != DS_NODE_DONE) wake = now;
    }
    if (job->stopping && !job->drop_at_ms && job->kill_at_ms < wake) wake = job->kill_at_ms;
    if (job->drop_at_ms && job->drop_at_ms < wake) wake = job->drop_at_ms;
    return wake > now ? (int)(wake - now) : 0;
}

static void run_loop(ds_job *job, int sigfd, ds_ssh_config **ssh_config) {
    int nn = job->plan->nnodes;
    struct pollfd *pf = calloc((size_t)(2 + 3 * nn), sizeof *pf);
    if (!pf) {
        ds_job_stop(job, "out of memory");
        for (int i = 0; i < nn; i++) ds_node_abandon(&job->nodes[i], "out of memory");
        return;
    }
    ds_node_handler h = {.ctx = job, .frame = ds_job_on_frame, .agent_line = ds_job_on_agent_line};
    long long next_tick = 0;
    for (;;) {
        start_queued(job, ssh_config);
        int live = 0;
        for (int i = 0; i < nn; i++) live += job->nodes[i].state != DS_NODE_DONE;
        if (!live) break;
        if (job->stopping && !job->drop_at_ms && ds_now_ms() >= job->kill_at_ms) {
            job->drop_at_ms = ds_now_ms() + DS_DROP_AFTER_MS;
            for (int i = 0; i < nn; i++)
                if (job->nodes[i].state != DS_NODE_DONE) ds_job_kill_node(job, &job->nodes[i]);
        }
        if (job->drop_at_ms && ds_now_ms() >= job->drop_at_ms) {
            for (int i = 0; i < nn; i++) {
                ds_node *n = &job->nodes[i];
                if (n->state == DS_NODE_DONE) continue;
                ds_node_abandon(n, "did not stop, even when killed; dropped");
                ds_job_on_node_done(job, n);
            }
            break;
        }
        int k = 0;
        pf[k++] = (struct pollfd){.fd = sigfd, .events = POLLIN};
        pf[k++] = (struct pollfd){.fd = ds_store_server_event_fd(job->store), .events = POLLIN};
        for (int i = 0; i < nn; i++) {
            ds_node *n = &job->nodes[i];
            n->pf_at = k;
            k += n->pf_n = ds_node_pollfds(n, pf + k);
        }
        if (poll(pf, (nfds_t)k, poll_timeout(job)) < 0 && errno != EINTR) break;
        handle_signals(job, sigfd);
        /* Only nodes with something to do (ready, or data libssh2 holds: ds_node_due). */
        long long polled = ds_now_ms();
        for (int i = 0; i < nn; i++) {
            ds_node *n = &job->nodes[i];
            if (!ds_node_due(n, pf, polled)) continue;
            int was_connecting = n->state == DS_NODE_CONNECTING;
            ds_node_io(n, &h);
            if (was_connecting && n->state == DS_NODE_STARTED)
                ds_event(job->ev, "node %d (%s): SSH session open, agent starting", i, n->plan->host);
            if (n->state == DS_NODE_DONE) ds_job_on_node_done(job, n);
        }
        handle_store_events(job);
        long long now = ds_now_ms();
        if (now >= next_tick) {
            check_heartbeats(job);
            for (int i = 0; i < nn; i++) ds_node_keepalive(&job->nodes[i]);
            /* often enough that a lost node is seen soon after heartbeat_timeout */
            int tick = job->spec->heartbeat_timeout_ms / 4;
            next_tick = now + (tick < 50 ? 50 : tick > 1000 ? 1000 : tick);
        }
        if (job->nexited == job->plan->world_size)
            for (int i = 0; i < nn; i++) ds_node_stop(&job->nodes[i]); /* agents are leaving anyway */
    }
    free(pf);
}

static void job_free(ds_job *job) {
    ds_srun_free(job);
    if (job->nodes)
        for (int i = 0; i < job->plan->nnodes; i++) ds_node_free(&job->nodes[i]);
    free(job->nodes);
    free(job->ranks);
    ds_store_server_stop(job->store);
    ds_monitor_close(job->monitor);
    ds_logs_close(job->logs);
    ds_events_close(job->ev);
    free(job->log_root);
    free(job->attempt_dir);
    memset(job->token, 0, sizeof job->token);
}

int ds_controller_run(const ds_jobspec *spec, const ds_plan *plan) {
    ds_job job = {.spec = spec, .plan = plan, .first_failed_rank = -1, .t0_ms = ds_now_ms()};
    ds_err err = {{0}};
    if (ds_fd_budget_check(plan->nnodes, &err) != 0) { /* raises the limit; says when it is not enough */
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        return 1;
    }
    ds_ssh_config *ssh_config = NULL;
    int sigfd = setup_signals(&err);
    job.nodes = calloc((size_t)plan->nnodes, sizeof *job.nodes);
    job.ranks = calloc((size_t)plan->world_size, sizeof *job.ranks);
    if (sigfd < 0 || !job.nodes || !job.ranks || make_job_id(&job, &err) != 0 ||
        make_log_dirs(&job, &err) != 0 || ds_job_monitor_open(&job, &err) != 0 || start_store(&job, &err) != 0 ||
        ds_ssh_global_init(&err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg[0] ? err.msg : "out of memory");
        job_free(&job);
        return 1;
    }
    ds_event(job.ev, "job %s: %d ranks on %d nodes, logs in %s", job.id, plan->world_size, plan->nnodes,
             job.attempt_dir);
    for (int i = 0; i < plan->nnodes; i++) {
        ds_node *n = &job.nodes[i];
        n->plan = &plan->nodes[i];
        n->local.in_fd = n->local.out_fd = n->local.err_fd = -1;
        if (job.stopping) {
            n->state = DS_NODE_DONE;
            continue;
        }
        err.msg[0] = 0;
        if (queue_plan(&job, n, &err) != 0 || (ds_start_admit(&job, n) && start_node(&job, n, &ssh_config, &err) != 0)) {
            snprintf(n->error, sizeof n->error, "%s", err.msg);
            n->failed = 1;
            n->state = DS_NODE_DONE;
            ds_job_stop(&job, "node %d (%s): %s", i, n->plan->host, err.msg);
        }
    }
    ds_srun_launch(&job);
    run_loop(&job, sigfd, &ssh_config);
    ds_ssh_config_free(ssh_config);
    ds_job_monitor_end(&job);
    int status = ds_job_summary(&job);
    job_free(&job);
    close(sigfd);
    return status;
}
