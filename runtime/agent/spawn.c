/* Starting one worker. The child is made to die with the agent three ways, because a
 * node must never keep orphans: PR_SET_PDEATHSIG (the agent dies), the lifeline pipe
 * on fd 3 that the worker watches (covers the worker's own children too), and its own
 * process group, which the agent signals as a whole; where the node offers one, its
 * cgroup (cgroup.h) also holds every descendant that left the group. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "agent.h"
#include "error_file.h"
#include "ds_signals.h"

extern char **environ;

/* The worker's pipes to the agent: stdout, stderr, the metrics channel (fd 4,
 * DS_METRICS_FD) and the failure record (fd 5, DS_ERROR_FD). */
enum { PIPE_OUT, PIPE_ERR, PIPE_METRICS, PIPE_RECORD, NPIPES };

static int env_has_key(char **env, int n, const char *kv) {
    size_t k = strcspn(kv, "=");
    for (int i = 0; i < n; i++)
        if (!strncmp(env[i], kv, k) && env[i][k] == '=') return 1;
    return 0;
}

/* The plan's variables and the agent's extras win over the agent's own environment. */
static char **build_env(const ds_agent *a, const ds_agent_worker *w) {
    int next = 12, nenv = 0;
    while (environ[nenv]) nenv++;
    char **env = calloc((size_t)(nenv + w->nenv + next + 1), sizeof *env);
    if (!env) return NULL;
    int n = 0, ok = 1;
    for (int i = 0; i < w->nenv; i++) env[n++] = strdup(w->env[i]);
    if (a->rdzv) ok &= asprintf(&env[n++], "DS_RDZV=%s", a->rdzv) > 0;
    if (a->token) ok &= asprintf(&env[n++], "DS_STORE_TOKEN=%s", a->token) > 0;
    if (a->host) ok &= asprintf(&env[n++], "DS_HOST=%s", a->host) > 0;
    ok &= asprintf(&env[n++], "DS_AGENT_FD=3") > 0;
    ok &= asprintf(&env[n++], "DS_METRICS_FD=4") > 0;
    ok &= asprintf(&env[n++], "DS_ERROR_FD=5") > 0;
    ok &= asprintf(&env[n++], "DS_RDZV_TIMEOUT_MS=%d", a->rdzv_timeout_ms) > 0;
    if (a->progress_ms > 0) ok &= asprintf(&env[n++], "DS_PROGRESS_MS=%d", a->progress_ms) > 0;
    if (w->cgroup) ok &= asprintf(&env[n++], "DS_CGROUP_PATH=%s", w->cgroup) > 0;
    if (a->ckpt_mode > 0) ok &= asprintf(&env[n++], "DS_CKPT_MODE=0%o", (unsigned)a->ckpt_mode) > 0;
    if (a->errdir) {
        char *path = ds_error_file_path(a->errdir, w->rank);
        ok &= path && asprintf(&env[n++], "TORCHELASTIC_ERROR_FILE=%s", path) > 0;
        free(path);
    }
    for (int i = 0; i < n; i++) ok &= env[i] != NULL;
    int planned = n;
    for (int i = 0; i < nenv && ok; i++) {
        if (env_has_key(env, planned, environ[i])) continue;
        if (!(env[n++] = strdup(environ[i]))) ok = 0;
    }
    if (!ok) {
        for (int i = 0; i < n; i++) free(env[i]);
        free(env);
        return NULL;
    }
    return env;
}

static void free_env(char **env) {
    for (int i = 0; env[i]; i++) {
        memset(env[i], 0, strlen(env[i])); /* the token was in there */
        free(env[i]);
    }
    free(env);
}

/* dsrun worker --job ID --rank R SCRIPT.lua ARGS..., or for a program that is not Lua
 * dsrun worker --job ID --rank R --exec COMMAND... (the worker runs it as its child). */
static char **build_argv(const ds_agent *a, const char *self, char *rankbuf, char *local_rank_arg) {
    int nprog = 0;
    while (a->program_argv && a->program_argv[nprog]) nprog++;
    char **argv = calloc((size_t)(a->nargs + nprog + 10), sizeof *argv);
    if (!argv) return NULL;
    int n = 0;
    argv[n++] = (char *)self;
    argv[n++] = "worker";
    argv[n++] = "--job"; /* a marker, so the process table shows whose job it is */
    argv[n++] = a->job;
    argv[n++] = "--rank";
    argv[n++] = rankbuf;
    if (a->program) {
        argv[n++] = "--exec";
        for (int i = 0; i < nprog; i++) argv[n++] = a->program_argv[i];
        if (a->local_rank_arg) argv[n++] = local_rank_arg;
        return argv;
    }
    argv[n++] = a->script;
    for (int i = 0; i < a->nargs; i++) argv[n++] = a->args[i];
    return argv;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_child(const ds_agent *a, pid_t agent_pid, const int *pipe_w, const char *cgroup_procs,
                       char **argv, char **env) {
    setpgid(0, 0);
    if (cgroup_procs) { /* into the rank's cgroup before anything it starts */
        int fd = open(cgroup_procs, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, "0", 1) != 1) _exit(126);
        close(fd);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != agent_pid) _exit(127); /* the agent died before prctl */
    ds_signals_unblock(); /* what a process started by hand would have */
    if (a->link) {
        /* Under srun the scheduler's warning (sbatch --signal=USR1@T) reaches every
         * process of the step; the agent passes it on to the controller, which decides. */
        struct sigaction ignore = {.sa_handler = SIG_IGN};
        sigaction(SIGUSR1, &ignore, NULL);
        sigaction(SIGUSR2, &ignore, NULL);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(pipe_w[PIPE_OUT], 1) < 0 || dup2(pipe_w[PIPE_ERR], 2) < 0 ||
        dup2(a->lifeline_r, 3) < 0 || dup2(pipe_w[PIPE_METRICS], 4) < 0 || dup2(pipe_w[PIPE_RECORD], 5) < 0)
        _exit(127);
    fcntl(3, F_SETFD, 0); /* dup2 onto itself would have kept close-on-exec */
    fcntl(4, F_SETFD, 0);
    fcntl(5, F_SETFD, 0);
    close_range(6, ~0U, 0);
    execve(argv[0], argv, env);
    static const char msg[] = "dsrun agent: cannot exec the worker\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
}

int ds_agent_spawn(ds_agent *a, ds_agent_worker *w, ds_err *err) {
    static char self[4096];
    if (!self[0]) {
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return ds_err_errno(err, errno, "readlink /proc/self/exe");
        self[n] = 0;
    }
    int pipes[NPIPES][2], npipes = 0;
    for (; npipes < NPIPES; npipes++)
        if (pipe2(pipes[npipes], O_CLOEXEC) != 0) break;
    if (npipes < NPIPES) {
        int e = errno;
        for (int i = 0; i < npipes; i++) close(pipes[i][0]), close(pipes[i][1]);
        return ds_err_errno(err, e, "pipe");
    }
    char rankbuf[16], local_rank_arg[32];
    snprintf(rankbuf, sizeof rankbuf, "%d", w->rank);
    snprintf(local_rank_arg, sizeof local_rank_arg, "--local_rank=%d", (int)(w - a->workers)); /* plan order */
    char **env = build_env(a, w);
    char **argv = build_argv(a, self, rankbuf, local_rank_arg);
    /* A simulated cluster (docs/scale.md) runs a light rank program instead. */
    if (argv && getenv("DS_TEST_WORKER_EXE")) argv[0] = getenv("DS_TEST_WORKER_EXE");
    pid_t agent_pid = getpid();
    char procs[4200];
    if (w->cgroup) snprintf(procs, sizeof procs, "%s/cgroup.procs", w->cgroup);
    pid_t pid = env && argv ? fork() : -1;
    int fork_errno = errno;
    int pipe_w[NPIPES];
    for (int i = 0; i < NPIPES; i++) pipe_w[i] = pipes[i][1];
    if (pid == 0) exec_child(a, agent_pid, pipe_w, w->cgroup ? procs : NULL, argv, env);
    if (env) free_env(env);
    free(argv);
    for (int i = 0; i < NPIPES; i++) close(pipes[i][1]);
    if (pid < 0) {
        for (int i = 0; i < NPIPES; i++) close(pipes[i][0]);
        return ds_err_errno(err, fork_errno, "starting rank %d", w->rank);
    }
    /* Also from the parent: the group must exist before the agent signals it. */
    setpgid(pid, pid);
    for (int i = 0; i < NPIPES; i++) fcntl(pipes[i][0], F_SETFL, O_NONBLOCK);
    w->pid = pid;
    w->out_fd = pipes[PIPE_OUT][0];
    w->err_fd = pipes[PIPE_ERR][0];
    w->metrics_fd = pipes[PIPE_METRICS][0];
    w->rec_fd = pipes[PIPE_RECORD][0];
    w->running = 1;
    return 0;
}
