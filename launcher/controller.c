/* The controller's run of a job (controller.h): sets up the logs and the store, starts
 * every node's agent at once (fork/exec locally, SSH elsewhere), then one poll loop
 * serves them all until every agent is gone, and prints the summary. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "controller.h"
#include "exit_codes.h"
#include "notify.h"
#include "fd_budget.h"
#include "job.h"
#include "node_set.h"
#include "relay.h"
#include "restart.h"
#include "run_dir.h"
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

/* libcurl once per process, before the webhook's thread or a fetch uses it: a second
 * curl_global_init while the webhook's thread runs would race it (libcurl < 7.84). */
static void curl_init_once(void) {
    static int done;
    if (!done) curl_global_init(CURL_GLOBAL_DEFAULT);
    done = 1;
}

static int make_run_dir(ds_job *job, ds_err *err) {
    const ds_jobspec *s = job->spec;
    const char *dir = s->log_dir ? s->log_dir : "logs";
    int rc = dir[0] == '/' ? asprintf(&job->job_dir, "%s/%s", dir, s->name)
                           : asprintf(&job->job_dir, "%s/%s/%s", s->workdir, dir, s->name);
    if (rc < 0) {
        job->job_dir = NULL;
        return ds_err_set(err, "out of memory");
    }
    if (ds_run_dir_create(job->job_dir, strrchr(job->id, '-') + 1, s->log_mode, &job->run_dir, err) != 0) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/launcher.log", job->run_dir);
    job->ev = ds_events_open(path, job->id, s->log_mode & 0666, err);
    if (!job->ev) return -1;
    if (s->webhook) {
        curl_init_once();
        if (!(job->notify = ds_notify_start(s->webhook, s->notify_timeout_ms, err)))
            return ds_err_prefix(err, "[notify] webhook");
        ds_events_set_notify(job->ev, job->notify);
    }
    return 0;
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
              config_int(b, "grace_ms", DS_STOP_GRACE_MS) | config_int(b, "rdzv_timeout_ms", s->rdzv_timeout_ms) |
              config_int(b, "progress_ms", ds_rank_progress_interval_ms(s)) | config_int(b, "ckpt_mode", s->ckpt_mode);
    for (int i = 0; i < s->nargs; i++) bad |= config(b, "arg", s->args[i]);
    bad |= config(b, "kind", ds_jobspec_is_lua(s) ? "lua" : "program") |
           config_int(b, "attempt", job->attempt) | config_int(b, "master_port", job->plan->master_port);
    for (int i = 0; i < s->ninterp; i++) bad |= config(b, "interp", s->interpreter[i]);
    if (s->local_rank_arg) bad |= config_int(b, "local_rank_arg", 1);
    if (!bad && job->files.nfiles) {
        /* The controller's own node reads them from the workdir it wrote them to. */
        if (n->plan->local && !s->ssh_force) {
            if (ds_fetch_place(&job->files, s->workdir, err) != 0) return -1;
        } else if (ds_fetch_queue(&job->files, b, err) != 0) {
            return -1;
        }
    }
    for (int r = 0; r < job->plan->world_size && !bad; r++) {
        if (job->plan->ranks[r].node_rank != n->plan->node_rank) continue;
        bad |= ds_frame_append(b, DS_FRAME_RANK, (uint32_t)r, NULL, 0);
        char **env = ds_plan_rank_env(job->plan, s, r, job->id, job->attempt);
        if (!env) return ds_err_set(err, "out of memory");
        for (char **e = env; *e; e++) bad |= ds_frame_append(b, DS_FRAME_ENV, (uint32_t)r, *e, strlen(*e));
        ds_plan_env_free(env);
    }
    bad |= ds_frame_append(b, DS_FRAME_GO, 0, NULL, 0);
    ds_node_wake(n); /* (its start wakes it too; bytes queued are work either way) */
    return bad ? ds_err_set(err, "out of memory (or an [env] value over 1 MiB)") : 0;
}

/* ---- starting the nodes ---- */

/* ssh_config: read when the first node needs SSH (a local or srun job never reads it). */
static int start_node(ds_job *job, ds_node *n, ds_ssh_config **ssh_config, ds_err *err) {
    const ds_jobspec *s = job->spec;
    char node[16];
    snprintf(node, sizeof node, "%d", n->plan->node_rank);
    if (s->launch_method == DS_LAUNCH_SRUN) return ds_srun_attach(job, n, err);
    if (ds_relay_wanted(job)) return ds_relay_attach(job, n, err);
    if (n->plan->local && !s->ssh_force) {
        char *argv[] = {s->dsrun, "agent", "--job", job->id, "--node", node, NULL};
        if (ds_node_start_local(n, argv, err) != 0) return -1;
        ds_event(job->ev, "node %d (%s): agent started locally, pid %d", n->plan->node_rank, n->plan->host,
                 (int)n->local.pid);
        return 0;
    }
    char *dsrun = ds_shell_quote(s->dsrun), *id = ds_shell_quote(job->id), *cmd = NULL;
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
static void start_queued(ds_job *job, const ds_node_set *set, ds_ssh_config **ssh_config) {
    int in_flight = ds_node_set_connecting(set);
    ds_node *n;
    while ((n = ds_start_next(job, in_flight))) {
        ds_err err = {{0}};
        if (start_node(job, n, ssh_config, &err) == 0) {
            in_flight += n->state == DS_NODE_CONNECTING; /* (the set counts it at its first turn) */
            continue;
        }
        ds_job_node_failed(job, n, err.msg);
        n->state = DS_NODE_DONE;
        ds_node_wake(n); /* the loop counts it done */
        ds_job_stop(job, "node %d (%s): %s", n->plan->node_rank, n->plan->host, err.msg);
    }
}

/* ---- the loop ---- */

static int setup_signals(ds_err *err) {
    /* A shell starts background jobs with SIGINT ignored; dslaunch handles it itself. */
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, 0};
    signal(SIGXFSZ, SIG_IGN); /* a log over the file size limit is a failed write, not our death */
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
        if (!job->stopping && !job->drain_sig && (job->spec->drain_signals & 1 << sig)) {
            ds_job_drain(job, sig);
        } else if (!job->stopping) {
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

/* A node whose agent stopped heartbeating is lost even if its SSH link looks alive. A
 * running node is looked at when its last heartbeat would be too old (its alarm in the
 * node set, first set when it began running), not at every tick. */
static void check_heartbeats(ds_job *job, ds_node_set *set) {
    if (job->stopping || job->spec->heartbeat_timeout_ms <= 0) return;
    int64_t now = ds_now_ms(), timeout = job->spec->heartbeat_timeout_ms;
    for (int i; (i = ds_node_set_alarm_due(set, now)) >= 0;) {
        ds_node *n = &job->nodes[i];
        if (n->state != DS_NODE_RUNNING) continue;
        int64_t last = ds_store_server_last_heartbeat_ms(job->store, n->plan->node_rank);
        /* (a heartbeat from before this attempt began was the previous agent's) */
        if (last < job->t0_ms || now - last <= timeout) {
            ds_node_set_alarm(set, i, last < job->t0_ms ? now + timeout : last + timeout + 1);
            continue;
        }
        char why[128];
        snprintf(why, sizeof why, "no heartbeat for %.1f s", (double)(now - last) / 1000);
        ds_job_node_failed(job, n, why);
        ds_job_stop(job, "node %d (%s): %s", i, n->plan->host, why);
        /* It will not answer a polite stop: kill its agent and ranks now. */
        ds_job_kill_node(job, n);
        return;
    }
}

/* How long the poll may wait: until a node needs a turn no descriptor will announce
 * (node_set.h), a stop's next step, or a second at most (the tick's checks). */
static int poll_timeout(const ds_job *job, ds_node_set *set) {
    long long now = ds_now_ms(), wake = now + 1000;
    int nodes = ds_node_set_timeout(set, now);
    if (nodes >= 0 && now + nodes < wake) wake = now + nodes;
    if (job->stopping && !job->drop_at_ms && job->kill_at_ms < wake) wake = job->kill_at_ms;
    if (job->drop_at_ms && job->drop_at_ms < wake) wake = job->drop_at_ms;
    return wake > now ? (int)(wake - now) : 0;
}

/* The attempt is over for the nodes: abandons every one still there (their agents stop
 * their nodes when they see their stdin close). */
static void abandon_all(ds_job *job, const char *why, int tell) {
    for (int i = 0; i < job->plan->nnodes; i++) {
        ds_node *n = &job->nodes[i];
        if (n->state == DS_NODE_DONE) continue;
        ds_node_abandon(n, why);
        if (tell) ds_job_on_node_done(job, n);
    }
}

/* One turn for each node with something to do this pass (node_set.h): -1 with err when
 * the epoll set refuses a registration. */
static int turn_nodes(ds_job *job, ds_node_set *set, int polled_ready, ds_err *err) {
    ds_node_handler h = {.ctx = job, .frame = ds_job_on_frame, .agent_line = ds_job_on_agent_line};
    long long polled = ds_now_ms();
    int k = ds_node_set_gather(set, polled_ready, polled);
    for (int t = 0; t < k; t++) {
        int ready, i = ds_node_set_nth(set, t, &ready);
        ds_node *n = &job->nodes[i];
        if (ds_node_turn(n, ready, polled)) {
            int was_connecting = n->state == DS_NODE_CONNECTING, was_running = n->state == DS_NODE_RUNNING;
            ds_node_io(n, &h);
            if (!was_running && n->state == DS_NODE_RUNNING) ds_node_set_alarm(set, i, polled); /* check_heartbeats */
            if (was_connecting && n->state == DS_NODE_STARTED)
                ds_event(job->ev, "node %d (%s): SSH session open, agent starting", i, n->plan->host);
            if (n->state == DS_NODE_DONE) ds_job_on_node_done(job, n);
        }
        if (ds_node_set_update(set, i, polled, err) != 0) return -1;
    }
    return 0;
}

static void run_loop(ds_job *job, int sigfd, ds_ssh_config **ssh_config) {
    ds_err err = {{0}};
    ds_node_set *set = ds_node_set_new(job->nodes, job->plan->nnodes, &job->wakes, &err);
    if (!set) {
        ds_job_stop(job, "%s", err.msg);
        abandon_all(job, err.msg, 0);
        return;
    }
    long long next_tick = 0;
    int all_exited = 0;
    for (;;) {
        start_queued(job, set, ssh_config);
        if (!ds_node_set_live(set)) break;
        if (job->stopping && !job->drop_at_ms && ds_now_ms() >= job->kill_at_ms) {
            job->drop_at_ms = ds_now_ms() + DS_DROP_AFTER_MS;
            for (int i = 0; i < job->plan->nnodes; i++)
                if (job->nodes[i].state != DS_NODE_DONE) ds_job_kill_node(job, &job->nodes[i]);
        }
        if (job->drop_at_ms && ds_now_ms() >= job->drop_at_ms) {
            abandon_all(job, "did not stop, even when killed; dropped", 1);
            break;
        }
        /* The nodes' descriptors are in the epoll set (node_set.h): three to poll. */
        struct pollfd pf[3] = {{.fd = sigfd, .events = POLLIN},
                               {.fd = ds_store_server_event_fd(job->store), .events = POLLIN},
                               {.fd = ds_node_set_fd(set), .events = POLLIN}};
        if (poll(pf, 3, poll_timeout(job, set)) < 0 && errno != EINTR) break;
        handle_signals(job, sigfd);
        if (turn_nodes(job, set, pf[2].revents != 0, &err) != 0) {
            ds_job_stop(job, "%s", err.msg);
            abandon_all(job, err.msg, 0);
            break;
        }
        handle_store_events(job);
        long long now = ds_now_ms();
        if (now >= next_tick) {
            check_heartbeats(job, set);
            ds_job_check_drain(job);
            ds_job_check_progress(job);
            /* often enough that a lost node is seen soon after heartbeat_timeout */
            int tick = job->spec->heartbeat_timeout_ms / 4, progress = ds_rank_progress_interval_ms(job->spec);
            if (progress && progress < tick) tick = progress;
            next_tick = now + (tick < 50 ? 50 : tick > 1000 ? 1000 : tick);
        }
        if (job->nexited == job->plan->world_size && !all_exited++)
            for (int i = 0; i < job->plan->nnodes; i++) ds_node_stop(&job->nodes[i]); /* agents are leaving anyway */
    }
    ds_node_set_free(set);
}

static void job_free(ds_job *job) {
    ds_job_end_attempt(job);
    ds_fetch_free(&job->files);
    int dropped = ds_notify_stop(job->notify); /* the last events get their chance */
    if (dropped) fprintf(stderr, "dslaunch: %d event%s did not reach the webhook\n", dropped, dropped == 1 ? "" : "s");
    if (job->store) {
        char served[400];
        ds_store_server_describe_requests(job->store, served, sizeof served);
        ds_event(job->ev, "store served %s", served);
    }
    ds_store_server_stop(job->store);
    ds_events_close(job->ev);
    free(job->job_dir);
    free(job->run_dir);
    memset(job->token, 0, sizeof job->token);
}

/* URLs as the script or arguments: fetched and checked before any rank starts. */
static int fetch_files(ds_job *job, ds_restart *rs) {
    const ds_jobspec *s = rs->spec;
    int urls = ds_fetch_is_url(s->script);
    for (int i = 0; i < s->nargs; i++) urls |= ds_fetch_is_url(s->args[i]);
    if (!urls) return 0;
    ds_err err = {{0}};
    curl_init_once();
    if (ds_fetch_resolve(&job->files, s->script, s->args, s->nargs, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        ds_json *j = ds_event_begin(job->ev, "failed");
        if (j) {
            ds_json_kint(j, "exit_code", DS_EXIT_USER_ERROR);
            ds_json_kstr(j, "reason", err.msg);
        }
        ds_event_end(job->ev, "job finished: FAILED before any rank started: %s", err.msg);
        return -1;
    }
    rs->run_spec.script = job->files.script;
    rs->run_spec.args = job->files.args;
    for (int i = 0; i < job->files.nfiles; i++)
        ds_event(job->ev, "fetched %s (%zu bytes, sha256 %s) as %s", job->files.files[i].url, job->files.files[i].size,
                 job->files.files[i].sha, job->files.files[i].relpath);
    return 0;
}

/* Starts the attempt's nodes: SSH sessions at most [launch] max_handshakes at once, the
 * others queued for run_loop (start_queue.h); a node that cannot start stops the job. */
static void start_nodes(ds_job *job, ds_ssh_config **ssh_config) {
    ds_err err = {{0}};
    int in_flight = 0;
    for (int i = 0; i < job->plan->nnodes; i++) {
        ds_node *n = &job->nodes[i];
        if (job->stopping) {
            n->state = DS_NODE_DONE;
            continue;
        }
        err.msg[0] = 0;
        if (queue_plan(job, n, &err) != 0 ||
            (ds_start_admit(job, n, in_flight) && start_node(job, n, ssh_config, &err) != 0)) {
            ds_job_node_failed(job, n, err.msg);
            n->state = DS_NODE_DONE;
            ds_node_wake(n);
            ds_job_stop(job, "node %d (%s): %s", i, n->plan->host, err.msg);
        }
        in_flight += n->state == DS_NODE_CONNECTING;
    }
    ds_srun_launch(job); /* [launch] method = srun: one step for the attached nodes */
    ds_relay_launch(job); /* past [launch] relay_threshold: the relays of the attached nodes */
}

/* The backoff before a restart. A signal during it ends the invocation: a drain signal
 * as drained (nothing runs; the next run resumes from the last checkpoint), any other
 * as interrupted. */
static ds_end wait_backoff(ds_job *job, int sigfd, long long ms) {
    long long until = ds_now_ms() + ms;
    for (long long now = ds_now_ms(); now < until; now = ds_now_ms()) {
        struct pollfd p = {.fd = sigfd, .events = POLLIN};
        poll(&p, 1, (int)(until - now));
        struct signalfd_siginfo si;
        while (read(sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
            int sig = (int)si.ssi_signo;
            if (sig == SIGCHLD) continue;
            int drain = job->spec->drain_signals & 1 << sig;
            fprintf(stderr, "dslaunch: SIG%s during the backoff: not restarting\n", sigabbrev_np(sig));
            ds_event(job->ev, "SIG%s during the backoff: not restarting", sigabbrev_np(sig));
            if (drain) job->drain_sig = sig;
            else job->interrupted = sig;
            return drain ? DS_END_DRAINED : DS_END_INTERRUPTED;
        }
    }
    return DS_END_FAILED; /* go on */
}

static double secs_since(long long t0) { return (double)(ds_now_ms() - t0) / 1000; }

/* One attempt from start to end; returns 1 to run another (after *wait_ms). */
static int run_attempt(ds_job *job, int sigfd, ds_restart *rs, long long *wait_ms, ds_end *end) {
    ds_err err = {{0}};
    if (ds_job_begin_attempt(job, job->attempt, rs->plan, &err) != 0 || ds_job_monitor_open(job, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        *end = DS_END_FAILED;
        return 0;
    }
    ds_json *j = ds_event_begin(job->ev, "started");
    if (j) {
        ds_json_kint(j, "attempt", job->attempt);
        ds_json_kint(j, "world_size", job->plan->world_size);
        ds_json_key(j, "nodes");
        ds_json_arr(j);
        for (int i = 0; i < job->plan->nnodes; i++) ds_json_str(j, job->plan->nodes[i].host);
        ds_json_end(j);
        ds_json_kint(j, "grad_accum", (long long)job->spec->engine.grad_accum);
        ds_json_kstr(j, "logs", job->attempt_dir);
    }
    ds_event_end(job->ev, "job %s attempt %d: %d ranks on %d nodes, logs in %s", job->id, job->attempt,
                 job->plan->world_size, job->plan->nnodes, job->attempt_dir);
    ds_ssh_config *ssh_config = NULL; /* read when the first node needs SSH */
    start_nodes(job, &ssh_config);
    run_loop(job, sigfd, &ssh_config);
    ds_ssh_config_free(ssh_config);
    ds_job_note_resumed(job);
    ds_job_monitor_end(job);
    job->logs_lost += ds_job_report_lost_logs(job);
    if (!ds_job_attempt_ok(job)) ds_job_find_root(job);
    int again = ds_restart_next(rs, job, wait_ms, end);
    if (*end == DS_END_OK || *end == DS_END_DRAINED) return 0;
    const char *why = job->root.found ? job->root.f.what : job->failure[0] ? job->failure : "not every rank exited 0";
    if (again)
        fprintf(stderr, "dslaunch: job %s attempt %d failed after %.1f s: %s\n", job->id, job->attempt,
                secs_since(job->t0_ms), why);
    else
        fprintf(stderr, "dslaunch: job %s FAILED after %.1f s: %s\n", job->id, secs_since(job->run_t0_ms), why);
    ds_json *ev = ds_event_begin(job->ev, "attempt_failed");
    if (ev) {
        ds_json_kint(ev, "attempt", job->attempt);
        ds_json_key(ev, "root_cause");
        ds_json_obj(ev);
        ds_json_kint(ev, "rank", job->root.found ? job->root.f.rank : -1);
        ds_json_kint(ev, "node", job->root.found ? job->root.f.node : -1);
        ds_json_kstr(ev, "what", why);
        ds_json_end(ev);
        ds_json_kint(ev, "consequences", job->root.nconsequences);
    }
    ds_event_end(job->ev, "attempt %d failed: %s", job->attempt, why);
    ds_job_report_attempt(job);
    for (char *line = rs->note, *nl; *line; line = nl + 1) { /* excluded nodes, spares, shrinking */
        if (!(nl = strchr(line, '\n'))) break;
        if (nl == line) continue;
        fprintf(stderr, "dslaunch: %.*s\n", (int)(nl - line), line);
        ds_event(job->ev, "%.*s", (int)(nl - line), line);
    }
    if (again) {
        fprintf(stderr, "dslaunch: restarting in %.1f s (restart %d of %d)\n", (double)*wait_ms / 1000,
                rs->restarts, job->spec->max_restarts);
        ds_json *r = ds_event_begin(job->ev, "restarting");
        if (r) {
            ds_json_kint(r, "attempt", job->attempt + 1);
            ds_json_kint(r, "restart", rs->restarts);
            ds_json_kint(r, "max_restarts", job->spec->max_restarts);
            ds_json_knum(r, "in_s", (double)*wait_ms / 1000);
        }
        ds_event_end(job->ev, "restarting in %.1f s (restart %d of %d)", (double)*wait_ms / 1000, rs->restarts,
                     job->spec->max_restarts);
    } else if (*end == DS_END_FAILED && job->spec->max_restarts > 0) {
        fprintf(stderr, "dslaunch: no restart left (%d of %d made)\n", rs->restarts, job->spec->max_restarts);
    }
    return again;
}

static int exit_status(const ds_job *job, ds_end end) {
    switch (end) {
    case DS_END_OK: return job->logs_lost || ds_events_lost_bytes(job->ev) ? DS_EXIT_LOGS_LOST : DS_EXIT_OK;
    case DS_END_USER_ERROR: return DS_EXIT_USER_ERROR;
    case DS_END_DRAINED: return DS_EXIT_DRAINED;
    case DS_END_INTERRUPTED: return DS_EXIT_INTERRUPTED_BASE + job->interrupted;
    default: return DS_EXIT_FAILED;
    }
}

static void report_end(ds_job *job, const ds_restart *rs, ds_end end) {
    for (int i = 0; i < rs->nhosts; i++)
        if (rs->hosts[i].excluded)
            fprintf(stderr, "dslaunch: node %s was excluded from this run: %s\n", rs->hosts[i].host, rs->hosts[i].why);
    if (end == DS_END_OK) {
        char after[64] = "";
        if (rs->restarts) snprintf(after, sizeof after, " (after %d restart%s)", rs->restarts, rs->restarts == 1 ? "" : "s");
        long long lost = job->logs_lost + ds_events_lost_bytes(job->ev);
        char but[160] = "";
        if (lost)
            snprintf(but, sizeof but, ", BUT %lld bytes of logs were lost (exit status %d)", lost, DS_EXIT_LOGS_LOST);
        fprintf(stderr, "dslaunch: job %s: all %d ranks exited 0 in %.1f s%s%s; logs in %s\n", job->id,
                job->plan->world_size, secs_since(job->run_t0_ms), after, but, job->attempt_dir);
        ds_json *j = ds_event_begin(job->ev, "finished");
        if (j) {
            ds_json_kint(j, "exit_code", exit_status(job, end));
            ds_json_kint(j, "logs_lost_bytes", lost);
        }
        ds_event_end(job->ev, "job finished: success");
    } else if (end == DS_END_DRAINED) {
        long long step = job->attempt_dir ? ds_job_drain_step(job) : -1;
        char at[64] = "";
        if (step >= 0) snprintf(at, sizeof at, " at step %lld", step);
        fprintf(stderr, "dslaunch: job %s drained%s on SIG%s: every rank saved its state and exited; "
                        "run the same command to resume (exit status %d: requeue); logs in %s\n",
                job->id, at, sigabbrev_np(job->drain_sig), DS_EXIT_DRAINED, job->run_dir);
        ds_json *j = ds_event_begin(job->ev, "drained");
        if (j) {
            if (step >= 0) ds_json_kint(j, "step", step);
            ds_json_kint(j, "exit_code", DS_EXIT_DRAINED);
        }
        ds_event_end(job->ev, "job finished: drained%s", at);
    } else {
        const char *why = end == DS_END_INTERRUPTED ? "interrupted"
                          : end == DS_END_USER_ERROR ? "the job itself is wrong"
                          : job->root.found          ? job->root.f.what
                                                     : "failed";
        ds_json *j = ds_event_begin(job->ev, "failed");
        if (j) {
            ds_json_kint(j, "exit_code", exit_status(job, end));
            ds_json_kstr(j, "reason", why);
        }
        ds_event_end(job->ev, "job finished: FAILED: %s", why);
    }
}

int ds_controller_run(const ds_jobspec *spec, const ds_plan *plan) {
    ds_job job = {.spec = spec, .plan = plan, .run_t0_ms = ds_now_ms()};
    ds_err err = {{0}};
    /* raises the limit; says when it is not enough */
    if (ds_fd_budget_check(plan->nnodes, ds_relay_wanted(&job), &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        return DS_EXIT_FAILED;
    }
    int sigfd = setup_signals(&err);
    if (sigfd < 0 || make_job_id(&job, &err) != 0 || make_run_dir(&job, &err) != 0 ||
        start_store(&job, &err) != 0 || ds_ssh_global_init(&err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg[0] ? err.msg : "out of memory");
        job_free(&job);
        if (sigfd >= 0) close(sigfd);
        return 1;
    }
    ds_restart rs;
    ds_restart_init(&rs, spec, plan);
    job.restart = &rs;
    job.spec = &rs.run_spec; /* restarts may change grad_accum; URLs become files */
    if (fetch_files(&job, &rs) != 0) {
        job_free(&job);
        ds_restart_free(&rs);
        close(sigfd);
        return DS_EXIT_USER_ERROR;
    }
    ds_event(job.ev, "job %s: %d ranks on %d nodes, logs in %s", job.id, plan->world_size, plan->nnodes,
             job.run_dir);
    ds_end end = DS_END_FAILED;
    long long wait_ms = 0;
    for (job.attempt = 0; run_attempt(&job, sigfd, &rs, &wait_ms, &end); job.attempt++) {
        end = wait_backoff(&job, sigfd, wait_ms);
        if (end != DS_END_FAILED) break;
    }
    report_end(&job, &rs, end);
    int status = exit_status(&job, end);
    job_free(&job);
    ds_restart_free(&rs);
    close(sigfd);
    return status;
}
