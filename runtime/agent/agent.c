/* `dsrun agent --job ID --node N`: the node's supervisor (agent.h). Single-threaded,
 * one poll loop: stdin (EOF = stop), the store socket (any byte or hang-up between
 * requests = the controller is gone), a signalfd (children, TERM), and every worker's
 * stdout/stderr pipe. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "error_file.h"
#include "cgroup.h"
#include "ds_proctree.h"
#include "store_client.h"
#include "store_mux.h"
#include "subcommands.h"
#include "ds_signals.h"
#include "ds_clock.h"

#define AGENT_DEFAULT_GRACE_MS 3000

/* Everything the agent says goes out as frames on stdout; a failed write means the
 * controller is gone, which stops the node like a closed stdin. */
static void send_frame(ds_agent *a, int type, int rank, const void *p, size_t n) {
    if (a->controller_gone || a->out_fd < 0) return; /* srun's agent before it joined: stderr only */
    ds_buf b = {0};
    if (ds_frame_append(&b, type, (uint32_t)rank, p, n) != 0 || ds_write_all(a->out_fd, ds_buf_head(&b), ds_buf_unread(&b)) != 0)
        a->controller_gone = 1;
    ds_buf_free(&b);
}

static void send_text(ds_agent *a, int type, int rank, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void send_text(ds_agent *a, int type, int rank, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    send_frame(a, type, rank, buf, n < 0 ? 0 : (size_t)n >= sizeof buf ? sizeof buf - 1 : (size_t)n);
}

static void signal_workers(ds_agent *a, int sig) {
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].running) kill(-a->workers[i].pid, sig); /* its whole group */
}

static void begin_stop(ds_agent *a, const char *why) {
    if (a->stopping) return;
    a->stopping = 1;
    a->kill_at_ms = ds_now_ms() + (a->grace_ms > 0 ? a->grace_ms : AGENT_DEFAULT_GRACE_MS);
    fprintf(stderr, "dsrun agent %s node %d: stopping (%s)\n", a->job, a->node, why);
    signal_workers(a, SIGTERM);
}

/* Forwards what is in one pipe now; closes it at EOF. */
static void forward(ds_agent *a, ds_agent_worker *w, int *fd, int type) {
    unsigned char buf[65536];
    for (;;) {
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n > 0) {
            send_frame(a, type, w->rank, buf, (size_t)n);
            if ((size_t)n < sizeof buf) return;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        close(*fd);
        *fd = -1;
        return;
    }
}

static ds_agent_worker *find_worker(ds_agent *a, pid_t pid) {
    for (int i = 0; i < a->nworkers; i++)
        if (a->workers[i].pid == pid) return &a->workers[i];
    return NULL;
}

/* The failure record the rank wrote before it exited, if any (failure_record.h): it is
 * in the pipe whole, or not at all. A descendant that still holds the write end cannot
 * make this wait: the read end is non-blocking. */
static int forward_record(ds_agent *a, ds_agent_worker *w) {
    if (w->rec_fd < 0) return 0;
    char buf[65536];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(w->rec_fd, buf + have, sizeof buf - have);
        if (n > 0 && (have += (size_t)n) < sizeof buf) continue;
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    close(w->rec_fd);
    w->rec_fd = -1;
    if (have) send_frame(a, DS_FRAME_FAILURE, w->rank, buf, have);
    return have > 0;
}

/* A program rank that ended badly without a record: what it wrote to its error file. */
static void forward_error_file(ds_agent *a, ds_agent_worker *w) {
    char *path = ds_error_file_path(a->errdir, w->rank);
    ds_buf rec;
    if (path && ds_error_file_record(path, w->rank, a->host, &rec)) {
        send_frame(a, DS_FRAME_FAILURE, w->rank, ds_buf_head(&rec), ds_buf_unread(&rec));
        ds_buf_free(&rec);
    }
    free(path);
    ds_error_file_forget(a->errdir, w->rank);
}

/* Reaps every exited child. As a child subreaper the agent also reaps the workers'
 * orphaned descendants, which are not reported. */
static void reap(ds_agent *a) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        ds_agent_worker *w = find_worker(a, pid);
        if (!w || !w->running) continue;
        w->running = 0;
        long long at = (long long)ds_wall_ms(); /* when it ended, as this node saw it */
        /* Output written before the exit is still in the pipes: send it first. */
        if (w->out_fd >= 0) forward(a, w, &w->out_fd, DS_FRAME_STDOUT);
        if (w->err_fd >= 0) forward(a, w, &w->err_fd, DS_FRAME_STDERR);
        if (w->metrics_fd >= 0) forward(a, w, &w->metrics_fd, DS_FRAME_METRICS);
        int failed = WIFSIGNALED(st) || WEXITSTATUS(st) != 0;
        if (!forward_record(a, w) && failed && a->errdir) forward_error_file(a, w);
        if (WIFSIGNALED(st)) send_text(a, DS_FRAME_EXIT, w->rank, "signal %d at %lld", WTERMSIG(st), at);
        else send_text(a, DS_FRAME_EXIT, w->rank, "exit %d at %lld", WEXITSTATUS(st), at);
        /* Whatever the rank left behind in its group, or anywhere (its cgroup), goes with it. */
        kill(-pid, SIGKILL);
        if (w->cgroup) ds_cgroup_kill(w->cgroup);
    }
}

static int nrunning(const ds_agent *a) {
    int n = 0;
    for (int i = 0; i < a->nworkers; i++) n += a->workers[i].running;
    return n;
}

static int handle_signals(ds_agent *a) {
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) continue;
        /* Under srun the scheduler signals every process of the step: the controller
         * hears of it from here (a warning such as USR1 asks it for a drain). */
        if (a->link) send_text(a, DS_FRAME_SIGNAL, -1, "%d", sig);
        if (sig == SIGUSR1 || sig == SIGUSR2) continue; /* the controller decides */
        begin_stop(a, strsignal(sig));
    }
    reap(a);
    return 0;
}

static void handle_stdin(ds_agent *a) {
    char buf[4096];
    ssize_t n = read(a->in_fd, buf, sizeof buf);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) begin_stop(a, "controller closed the channel");
}

static void handle_store(ds_agent *a) {
    /* Requests are synchronous, so nothing may arrive in between: readable means closed
     * (with the mux: its descriptor is readable when it lost the connection). */
    if (a->mux && ds_store_mux_error(a->mux)[0])
        fprintf(stderr, "dsrun agent %s node %d: %s\n", a->job, a->node, ds_store_mux_error(a->mux));
    begin_stop(a, "store connection lost");
    ds_store_mux_stop(a->mux);
    a->mux = NULL;
    ds_store_close(a->store);
    a->store = NULL;
}

static void heartbeat(ds_agent *a, long long *next) {
    long long now = ds_now_ms();
    if (!a->store || now < *next) return;
    ds_err err = {{0}};
    if (a->mux ? ds_store_mux_heartbeat(a->mux, a->node) != 0 : ds_store_heartbeat(a->store, a->node, &err) != 0) {
        fprintf(stderr, "dsrun agent %s node %d: heartbeat: %s\n", a->job, a->node,
                a->mux ? ds_store_mux_error(a->mux) : err.msg);
        handle_store(a);
        return;
    }
    *next = now + (a->heartbeat_ms > 0 ? a->heartbeat_ms : 5000);
}

static int run_loop(ds_agent *a) {
    long long next_hb = 0;
    int stdin_open = 1;
    /* Three descriptors of the agent's own, then each worker's output, error and metrics. */
    static const int kinds[3] = {DS_FRAME_STDOUT, DS_FRAME_STDERR, DS_FRAME_METRICS};
    struct pollfd *pf = calloc((size_t)(3 + 3 * a->nworkers), sizeof *pf);
    ds_agent_worker **owner = calloc((size_t)(3 + 3 * a->nworkers), sizeof *owner);
    if (!pf || !owner) {
        free(pf);
        free(owner);
        begin_stop(a, "out of memory");
        signal_workers(a, SIGKILL);
        return 1;
    }
    for (;;) {
        if (!a->stopping) heartbeat(a, &next_hb);
        if (a->controller_gone) begin_stop(a, "controller unreachable");
        if (nrunning(a) == 0) break;
        long long now = ds_now_ms();
        if (a->stopping && now >= a->kill_at_ms) signal_workers(a, SIGKILL);
        int n = 0;
        pf[n++] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = stdin_open ? a->in_fd : -1, .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = a->mux ? ds_store_mux_fd(a->mux) : a->store ? ds_store_fd(a->store) : -1,
                                  .events = POLLIN};
        for (int i = 0; i < a->nworkers; i++) {
            ds_agent_worker *w = &a->workers[i];
            owner[n] = w;
            pf[n++] = (struct pollfd){.fd = w->out_fd, .events = POLLIN};
            owner[n] = w;
            pf[n++] = (struct pollfd){.fd = w->err_fd, .events = POLLIN};
            owner[n] = w;
            pf[n++] = (struct pollfd){.fd = w->metrics_fd, .events = POLLIN};
        }
        long long wake = a->stopping ? a->kill_at_ms : next_hb;
        int timeout = wake > now ? (int)(wake - now) : 0;
        if (a->stopping && now >= a->kill_at_ms) timeout = 100; /* re-KILL until reaped */
        if (!a->stopping && !a->store) timeout = -1;            /* no store: no heartbeats */
        if (poll(pf, (nfds_t)n, timeout) < 0 && errno != EINTR) break;
        for (int i = 3; i < n; i++) {
            if (!pf[i].revents) continue;
            ds_agent_worker *w = owner[i];
            int kind = (i - 3) % 3;
            int *fd = kind == 0 ? &w->out_fd : kind == 1 ? &w->err_fd : &w->metrics_fd;
            if (*fd >= 0) forward(a, w, fd, kinds[kind]);
        }
        if (pf[0].revents) handle_signals(a);
        if (pf[1].revents) {
            handle_stdin(a);
            if (a->stopping) stdin_open = 0;
        }
        if (pf[2].revents && a->store) handle_store(a);
    }
    free(pf);
    free(owner);
    return 0;
}

/* Becomes the leader of a new session (or at least a new group) so that everything the
 * node runs can be found and signalled, and a subreaper so that orphans come back. */
static void own_process_group(void) {
    if (getpgrp() != getpid() && setsid() < 0) setpgid(0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
}

static int setup(ds_agent *a, ds_err *err) {
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, 0};
    if ((a->sigfd = ds_signals_fd(sigs, err)) < 0) return -1;
    int life[2];
    if (pipe2(life, O_CLOEXEC) != 0) return ds_err_errno(err, errno, "pipe");
    a->lifeline_r = life[0];
    a->lifeline_w = life[1];
    own_process_group();
    return 0;
}

static int connect_store(ds_agent *a, ds_err *err) {
    if (!a->rdzv || !a->rdzv[0]) return 0;
    char host[256];
    int port;
    if (ds_store_split_addr(a->rdzv, host, sizeof host, &port, err) != 0)
        return ds_err_prefix(err, "rendezvous address");
    int timeout = a->rdzv_timeout_ms > 0 ? a->rdzv_timeout_ms : 30000;
    if (timeout > 30000) timeout = 30000; /* the store is up before any agent starts */
    a->store = ds_store_connect(host, port, a->token ? a->token : "", timeout, err);
    if (!a->store) return ds_err_prefix(err, "rendezvous %s", a->rdzv);
    return ds_store_heartbeat(a->store, a->node, err) == 0 ? 0 : ds_err_prefix(err, "heartbeat");
}

/* The job's world, as the plan gives it to every rank (WORLD_SIZE); 0 when absent. */
static int plan_world(const ds_agent *a) {
    for (int i = 0; i < a->nworkers; i++)
        for (int k = 0; k < a->workers[i].nenv; k++)
            if (!strncmp(a->workers[i].env[k], "WORLD_SIZE=", 11)) return atoi(a->workers[i].env[k] + 11);
    return 0;
}

/* The node's ranks reach the store through this agent's connection (store_mux.h), and
 * its barriers of the whole world meet here first; DS_STORE_DIRECT=1 gives each rank its
 * own connection, as before (for comparison). */
static int start_mux(ds_agent *a, ds_err *err) {
    if (!a->store || getenv("DS_STORE_DIRECT")) return 0;
    int *ranks = malloc((size_t)(a->nworkers > 0 ? a->nworkers : 1) * sizeof *ranks);
    if (!ranks) return ds_err_set(err, "out of memory");
    for (int i = 0; i < a->nworkers; i++) ranks[i] = a->workers[i].rank;
    a->mux = ds_store_mux_start(a->store, a->token, plan_world(a), ranks, a->nworkers, err);
    free(ranks);
    return a->mux ? 0 : -1;
}

static int start_workers(ds_agent *a, ds_err *err) {
    if (chdir(a->workdir) != 0) return ds_err_errno(err, errno, "workdir %s", a->workdir);
    if (start_mux(a, err) != 0) return -1;
    if (a->program &&
        !(a->program_argv = ds_agent_program_argv(a->interp, a->ninterp, a->script, a->args, a->nargs, err)))
        return -1;
    if (a->program && ds_error_file_dir(a->job, &a->errdir, &a->errdir_lock, err) != 0) return -1;
    for (int i = 0; a->cg_base && i < a->nworkers; i++) {
        ds_agent_worker *w = &a->workers[i];
        if (!(w->cgroup = ds_cgroup_rank_create(a->cg_base, w->rank)))
            return ds_err_errno(err, errno, "cgroup for rank %d under %s", w->rank, a->cg_base);
    }
    for (int i = 0; i < a->nworkers; i++) {
        if (ds_agent_spawn(a, &a->workers[i], err) != 0) return -1;
        send_text(a, DS_FRAME_STARTED, a->workers[i].rank, "%d", (int)a->workers[i].pid);
    }
    return 0;
}

int dsrun_agent_main(int argc, char **argv) {
    /* --job/--node only mark the process in the process table; --srun says stdout is
     * srun's, shared by the step: frames go to the link once it is up (agent_link.c). */
    int srun = 0;
    for (int i = 1; i < argc; i++) srun |= !strcmp(argv[i], "--srun");
    ds_agent a = {0};
    a.sigfd = a.lifeline_r = a.lifeline_w = a.errdir_lock = -1;
    a.in_fd = 0;
    a.out_fd = srun ? -1 : 1;
    ds_err err = {{0}};
    int rc = 0;
    if (setup(&a, &err) != 0 || ds_agent_read_config(&a, 0, &err) != 0 ||
        (a.link && ds_agent_join(&a, &err) != 0) || connect_store(&a, &err) != 0) {
        send_text(&a, DS_FRAME_ERROR, -1, "%s", err.msg);
        fprintf(stderr, "dsrun agent: %s\n", err.msg);
        rc = 1;
    } else {
        a.cg_base = ds_cgroup_node_create(a.node, a.cg_why, sizeof a.cg_why);
        /* HELLO: the pid, then how the ranks' descendants are tracked (for launcher.log
         * and the controller's last-resort kill) */
        if (a.cg_base) send_text(&a, DS_FRAME_HELLO, -1, "%d\ncgroup %s", (int)getpid(), a.cg_base);
        else send_text(&a, DS_FRAME_HELLO, -1, "%d\nsubreaper (%s)", (int)getpid(), a.cg_why);
        int port = ds_agent_master_port(&a, &err); /* 1: node 0 failed, we were stopped */
        if (port < 0) {
            send_text(&a, DS_FRAME_ERROR, -1, "%s", err.msg);
            rc = 1;
        } else if (port == 0) {
            if (start_workers(&a, &err) != 0) {
                send_text(&a, DS_FRAME_ERROR, -1, "%s", err.msg);
                begin_stop(&a, "a worker could not start");
                rc = 1;
            }
            run_loop(&a);
        }
    }
    /* Nothing of the node outlives the agent. */
    signal_workers(&a, SIGKILL);
    close(a.lifeline_w);
    ds_kill_descendants(); /* as a subreaper it inherited every orphan of its ranks */
    ds_cgroup_node_remove(a.cg_base);
    for (int i = 0; a.errdir && i < a.nworkers; i++) ds_error_file_forget(a.errdir, a.workers[i].rank);
    ds_error_file_remove_dir(a.errdir);
    if (a.errdir_lock >= 0) close(a.errdir_lock);
    send_frame(&a, DS_FRAME_BYE, -1, NULL, 0);
    ds_store_mux_stop(a.mux);
    if (a.store) ds_store_close(a.store);
    ds_agent_free(&a);
    return rc;
}
