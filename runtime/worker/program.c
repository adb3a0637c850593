/* `dsrun worker --job ID --rank R --exec COMMAND...`: a rank whose program is not Lua.
 * The worker stays as the program's parent, so the program has what a Lua rank has: it
 * dies with the agent (the lifeline kills the worker's whole process group, the program
 * and what it started included), and its exit is the rank's exit, a signal included. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lifeline.h"
#include "program.h"

/* The environment a program gets beyond the plan's: Python writes through (as
 * `python -u` under deepspeed), and the node's cores are shared between its ranks, as
 * for Lua ranks (torchrun would set 1); a variable already set wins. */
static void program_env(void) {
    unsetenv("DS_STORE_TOKEN"); /* the program does not speak to dslaunch's store */
    unsetenv("DS_AGENT_FD");
    /* the pipes and reports of Lua ranks: the program's descriptors past 2 are closed */
    unsetenv("DS_METRICS_FD");
    unsetenv("DS_ERROR_FD");
    unsetenv("DS_PROGRESS_MS");
    setenv("PYTHONUNBUFFERED", "1", 0);
    const char *lws = getenv("LOCAL_WORLD_SIZE");
    long ranks = lws ? strtol(lws, NULL, 10) : 1, cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (ranks > 1 && !getenv("OMP_NUM_THREADS")) {
        char n[24];
        snprintf(n, sizeof n, "%ld", cores / ranks > 0 ? cores / ranks : 1);
        setenv("OMP_NUM_THREADS", n, 0);
    }
}

/* Ends this process the way the program ended. */
static int pass_on(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    int sig = WTERMSIG(status);
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none); /* the program's core, if any, was its own */
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
    return 128 + sig;
}

int ds_worker_exec(int argc, char **argv) {
    if (argc < 1) {
        fprintf(stderr, "usage: dsrun worker [--job ID --rank R] --exec COMMAND [ARGS...]\n");
        return 2;
    }
    ds_err err = {{0}};
    if (ds_lifeline_watch(&err) != 0) {
        fprintf(stderr, "dsrun worker: %s\n", err.msg);
        return 1;
    }
    program_env();
    /* The agent signals the whole group: the program acts on it, this process waits for
     * the program's end to report it. */
    static const int stop_sigs[] = {SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++) signal(stop_sigs[i], SIG_IGN);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "dsrun worker: fork: %s\n", strerror(errno));
        return 1;
    }
    if (pid == 0) {
        for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++) signal(stop_sigs[i], SIG_DFL);
        close_range(3, ~0U, 0); /* the lifeline stays with the worker */
        execvp(argv[0], argv);
        fprintf(stderr, "dsrun worker: cannot run '%s': %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 1;
    return pass_on(status);
}
