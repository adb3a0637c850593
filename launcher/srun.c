/* srun: see srun.h. Setting the step up and tearing it down, from the controller's
 * thread; srun_serve.c serves it meanwhile. */
#include "srun.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "job.h"
#include "local.h"
#include "srun_step.h"
#include "ds_clock.h"
#include "ds_signals.h"
#include "ds_tcp.h"

/* How long srun may take to end after its agents were told to stop, and again after
 * it was asked to cancel the step, before it is killed. */
#define SRUN_END_MS DS_STOP_GRACE_MS

static void close_fd(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static ds_srun_step *step_new(ds_job *job, ds_err *err) {
    ds_srun_step *st = calloc(1, sizeof *st);
    if (st) st->nodes = calloc((size_t)job->plan->nnodes, sizeof *st->nodes);
    if (!st || !st->nodes) {
        free(st);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    st->listen_fd = st->pidfd = st->in_w = st->out_r = st->err_r = -1;
    st->wake[0] = st->wake[1] = -1;
    return st;
}

int ds_srun_attach(ds_job *job, ds_node *n, ds_err *err) {
    if (!job->srun && !(job->srun = step_new(job, err))) return -1;
    ds_srun_step *st = job->srun;
    int far[3];
    if (ds_node_start_piped(n, far, err) != 0) return -1;
    srun_node *sn = &st->nodes[st->nnodes++];
    *sn = (srun_node){.host = n->plan->host, .index = (int)(n - job->nodes), .in_r = far[0], .out_w = far[1],
                      .err_w = far[2], .sock = -1, .procid = -1};
    ds_event(job->ev, "node %d (%s): its agent starts in the srun step", sn->index, sn->host);
    return 0;
}

/* ---- launch ---- */

static int config(ds_buf *b, const char *key, const char *val) {
    char kv[1024];
    int n = snprintf(kv, sizeof kv, "%s=%s", key, val);
    int rc = n > 0 && (size_t)n < sizeof kv ? ds_frame_append(b, DS_FRAME_CONFIG, 0, kv, (size_t)n) : -1;
    memset(kv, 0, sizeof kv);
    return rc;
}

/* What every agent reads on the stdin srun gives them all: where to connect, and the
 * token to prove it belongs to this job. Its own plan then comes over the link. */
static int bootstrap(ds_srun_step *st, const ds_job *job) {
    ds_buf *b = &st->bootstrap;
    int bad = config(b, "job", job->id) | config(b, "workdir", job->spec->workdir) |
              config(b, "script", job->spec->script) | config(b, "link", st->link) | config(b, "token", st->token);
    return bad | ds_frame_append(b, DS_FRAME_GO, 0, NULL, 0);
}

static int listen_link(ds_srun_step *st, const ds_job *job, ds_err *err) {
    const char *addr = job->spec->rdzv_addr ? job->spec->rdzv_addr : job->plan->master_addr;
    int port;
    st->listen_fd = ds_tcp_listen("srun link", addr, 0, &port, err);
    if (st->listen_fd < 0) return -1;
    snprintf(st->link, sizeof st->link, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, port);
    return 0;
}

/* srun's command line (malloc'd strings in a NULL-terminated array). */
static char **srun_argv(const ds_srun_step *st, const ds_job *job) {
    size_t listlen = 1;
    for (int i = 0; i < st->nnodes; i++) listlen += strlen(st->nodes[i].host) + 1;
    char *nodelist = malloc(listlen + 16);
    char **argv = calloc(20, sizeof *argv);
    if (!nodelist || !argv) {
        free(nodelist);
        free(argv);
        return NULL;
    }
    size_t len = (size_t)sprintf(nodelist, "--nodelist=");
    for (int i = 0; i < st->nnodes; i++) len += (size_t)sprintf(nodelist + len, "%s%s", i ? "," : "", st->nodes[i].host);
    int n = 0, ok = 1;
    ok &= (argv[n++] = strdup("srun")) != NULL;
    ok &= asprintf(&argv[n++], "--job-name=%s", job->id) > 0;
    ok &= asprintf(&argv[n++], "--nodes=%d", st->nnodes) > 0;
    ok &= asprintf(&argv[n++], "--ntasks=%d", st->nnodes) > 0;
    argv[n++] = nodelist;
    static const char *const FIXED[] = {"--ntasks-per-node=1", "--kill-on-bad-exit=1", "--overlap",
                                        "--input=all", "--label", "--mpi=none"};
    for (size_t i = 0; i < sizeof FIXED / sizeof FIXED[0]; i++) ok &= (argv[n++] = strdup(FIXED[i])) != NULL;
    ok &= asprintf(&argv[n++], "--chdir=%s", job->spec->workdir) > 0;
    ok &= (argv[n++] = strdup(job->spec->dsrun)) != NULL;
    ok &= (argv[n++] = strdup("agent")) != NULL;
    ok &= (argv[n++] = strdup("--job")) != NULL;
    ok &= (argv[n++] = strdup(job->id)) != NULL;
    ok &= (argv[n++] = strdup("--srun")) != NULL;
    if (!ok) {
        for (int i = 0; i < n; i++) free(argv[i]);
        free(argv);
        return NULL;
    }
    return argv;
}

static void free_argv(char **argv) {
    for (int i = 0; argv && argv[i]; i++) free(argv[i]);
    free(argv);
}

/* srun as PATH finds it, into path. */
static int find_srun(char *path, size_t cap, ds_err *err) {
    const char *dirs = getenv("PATH");
    for (const char *p = dirs ? dirs : "/usr/bin:/bin"; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(path, cap, "%.*s/srun", (int)len, p);
        if (len && access(path, X_OK) == 0) return 0;
        p += len + (p[len] == ':');
    }
    return ds_err_set(err, "srun is not in PATH (is Slurm's client installed here?)");
}

/* Starts srun as a local agent is started (local.h): its own session, so a Ctrl-C at
 * the terminal is the controller's to handle; pipes for its stdin, stdout, stderr. */
static int start_srun(ds_srun_step *st, char **argv, ds_err *err) {
    char path[4096];
    if (find_srun(path, sizeof path, err) != 0) return -1;
    char *name = argv[0];
    argv[0] = path;
    ds_local l;
    int rc = ds_local_start(&l, argv, err);
    argv[0] = name;
    if (rc != 0) return -1;
    st->pid = l.pid;
    st->in_w = l.in_fd;
    st->out_r = l.out_fd;
    st->err_r = l.err_fd;
    st->pidfd = pidfd_open(l.pid, 0); /* -1 on old kernels: the thread then looks every 100 ms */
    return 0;
}

static int start_thread(ds_srun_step *st, ds_err *err) {
    if (pipe2(st->wake, O_CLOEXEC | O_NONBLOCK) != 0) return ds_err_errno(err, errno, "pipe");
    int rc = ds_signals_thread(&st->thread, ds_srun_serve, st);
    if (rc != 0) return ds_err_errno(err, rc, "starting the srun thread");
    st->thread_started = 1;
    return 0;
}

void ds_srun_launch(ds_job *job) {
    ds_srun_step *st = job->srun;
    if (!st) return;
    ds_err err = {""};
    memcpy(st->token, job->token, sizeof st->token);
    st->join_timeout_ms = job->spec->rdzv_timeout_ms;
    st->grace_ms = SRUN_END_MS;
    char path[4200];
    snprintf(path, sizeof path, "%s/srun.log", job->attempt_dir);
    st->log = fopen(path, "we");
    char **argv = NULL;
    int rc = !st->log ? ds_err_errno(&err, errno, "%s", path) : listen_link(st, job, &err);
    if (rc == 0 && (bootstrap(st, job) != 0 || !(argv = srun_argv(st, job)))) rc = ds_err_set(&err, "out of memory");
    if (rc == 0) rc = start_srun(st, argv, &err);
    if (rc == 0) {
        ds_buf cmd = {0};
        for (int i = 0; argv[i]; i++) ds_buf_printf(&cmd, "%s%s", i ? " " : "", argv[i]);
        ds_event(job->ev, "srun step: %s (pid %d), agents join at %s", ds_buf_str(&cmd), (int)st->pid, st->link);
        if (st->log) fprintf(st->log, "# %s\n", ds_buf_str(&cmd)), fflush(st->log);
        ds_buf_free(&cmd);
        rc = start_thread(st, &err);
    }
    free_argv(argv);
    if (rc == 0) return;
    ds_event(job->ev, "srun step: cannot start: %s", err.msg);
    char why[1100];
    snprintf(why, sizeof why, "the srun step could not start: %s", err.msg);
    for (int i = 0; i < st->nnodes; i++) ds_srun_fail_node(st, &st->nodes[i], why);
}

/* ---- signals from Slurm ---- */

void ds_srun_on_signal(ds_job *job, ds_node *n, const ds_frame *f) {
    char buf[16];
    size_t len = f->len < sizeof buf - 1 ? f->len : sizeof buf - 1;
    memcpy(buf, f->payload, len);
    buf[len] = 0;
    int sig = atoi(buf);
    if (sig <= 0 || sig >= 64) return;
    const char *name = sigabbrev_np(sig) ? sigabbrev_np(sig) : "?";
    ds_event(job->ev, "node %d (%s): its agent got SIG%s", (int)(n - job->nodes), n->plan->host, name);
    ds_srun_step *st = job->srun;
    if (!st || (st->forwarded & 1ull << sig)) return;
    st->forwarded |= 1ull << sig;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
        kill(getpid(), sig); /* handled as if Slurm had signalled the controller itself */
        return;
    }
    char why[256];
    snprintf(why, sizeof why, "Slurm sent SIG%s to the job's processes (scancel, the time limit, preemption "
                              "or a node failure)", name);
    /* Slurm is ending the job: no restart, and the ranks this very signal killed are its
     * consequences, whichever of them dslaunch heard of first (summary.c). */
    job->sched_signal = sig;
    job->interrupted = sig;
    if (job->stopping) {
        snprintf(job->failure, sizeof job->failure, "%s", why);
        ds_event(job->ev, "the cause: %s", why);
        return;
    }
    ds_job_stop(job, "%s", why);
}

/* ---- teardown ---- */

/* Waits up to ms for srun to end; 1 when it has (and is reaped). */
static int wait_srun(ds_srun_step *st, int ms) {
    long long end = ds_now_ms() + ms;
    while (st->pid > 0) {
        int status;
        pid_t r = waitpid(st->pid, &status, WNOHANG);
        if (r == st->pid || (r < 0 && errno == ECHILD)) {
            st->status = status;
            st->pid = 0;
            break;
        }
        long long left = end - ds_now_ms();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = st->pidfd, .events = POLLIN};
        poll(&p, st->pidfd >= 0 ? 1 : 0, left < 100 ? (int)left : 100);
    }
    return 1;
}

void ds_srun_free(ds_job *job) {
    ds_srun_step *st = job->srun;
    if (!st) return;
    if (st->thread_started) {
        /* The thread closes srun's stdin and every link, then waits for srun (srun.h). */
        ssize_t ignored = write(st->wake[1], "x", 1);
        (void)ignored;
        pthread_join(st->thread, NULL);
    }
    close_fd(&st->in_w);
    if (st->pid > 0 && !wait_srun(st, st->grace_ms)) {
        ds_event(job->ev, "srun step: srun still runs %d s after its agents were stopped: cancelling the step",
                 st->grace_ms / 1000);
        kill(st->pid, SIGTERM); /* srun cancels the step */
        if (!wait_srun(st, st->grace_ms)) {
            ds_event(job->ev, "srun step: srun did not end: killing it");
            kill(st->pid, SIGKILL);
            waitpid(st->pid, &st->status, 0);
            st->pid = 0;
        }
    }
    if (st->status) ds_event(job->ev, "srun step: srun ended with status 0x%x", st->status);
    for (int i = 0; i < st->nnodes; i++) ds_srun_fail_node(st, &st->nodes[i], NULL);
    for (int i = 0; i < st->npending; i++) {
        close(st->pending[i].fd);
        ds_buf_free(&st->pending[i].in);
    }
    free(st->pending);
    close_fd(&st->listen_fd);
    close_fd(&st->pidfd);
    close_fd(&st->out_r);
    close_fd(&st->err_r);
    close_fd(&st->wake[0]);
    close_fd(&st->wake[1]);
    if (st->log) fclose(st->log);
    ds_buf_free(&st->bootstrap);
    ds_buf_free(&st->out_line);
    ds_buf_free(&st->err_line);
    memset(st->token, 0, sizeof st->token);
    free(st->nodes);
    free(st);
    job->srun = NULL;
}
