#include "plan_memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The largest number of ranks one node runs. */
static int local_world(const ds_plan *plan) {
    int n = 1;
    for (int i = 0; i < plan->nnodes; i++)
        if (plan->nodes[i].nslots > n) n = plan->nodes[i].nslots;
    return n;
}

/* Runs dsrun plan-memory; its stdout goes to out_fd (-1: ours). Returns its exit status,
 * or -1 with err. */
static int run_planner(const ds_plan *plan, const ds_jobspec *spec, int all, int out_fd, ds_err *err) {
    if (!ds_jobspec_is_lua(spec))
        return ds_err_set(err, "--plan-memory: %s is not a Lua script (the planner reads a ds model)",
                          spec->script);
    char **env = ds_plan_rank_env(plan, spec, 0, spec->name, 0);
    if (!env) return ds_err_set(err, "--plan-memory: out of memory");
    char world[16], local[16];
    snprintf(world, sizeof world, "%d", plan->world_size);
    snprintf(local, sizeof local, "%d", local_world(plan));
    int nargv = 0;
    const char **argv = calloc((size_t)spec->nargs + 16, sizeof *argv);
    if (!argv) {
        ds_plan_env_free(env);
        return ds_err_set(err, "--plan-memory: out of memory");
    }
    argv[nargv++] = spec->dsrun;
    argv[nargv++] = "plan-memory";
    argv[nargv++] = "--world";
    argv[nargv++] = world;
    argv[nargv++] = "--local-world";
    argv[nargv++] = local;
    if (plan->gpus) argv[nargv++] = "--device", argv[nargv++] = "cuda";
    if (all) argv[nargv++] = "--all";
    argv[nargv++] = spec->script;
    for (int i = 0; i < spec->nargs; i++) argv[nargv++] = spec->args[i];
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        /* as a rank on this node would run: dslaunch's environment (DS_SIM_MEMORY,
         * CUDA_VISIBLE_DEVICES, ...) with rank 0's on top */
        for (char **e = env; *e; e++) putenv(*e);
        if (out_fd >= 0) dup2(out_fd, STDOUT_FILENO);
        if (chdir(spec->workdir) != 0) _exit(126);
        execv(spec->dsrun, (char *const *)argv);
        fprintf(stderr, "dslaunch: cannot run %s: %s\n", spec->dsrun, strerror(errno));
        _exit(127);
    }
    free(argv);
    ds_plan_env_free(env);
    if (pid < 0) return ds_err_set(err, "--plan-memory: fork: %s", strerror(errno));
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return ds_err_set(err, "--plan-memory: waitpid: %s", strerror(errno));
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int ds_plan_memory_print(const ds_plan *plan, const ds_jobspec *spec, int all, ds_err *err) {
    return run_planner(plan, spec, all, -1, err);
}

static void copy_out(FILE *f) {
    char buf[4096];
    size_t n;
    rewind(f);
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stderr);
}

/* Whether the ranks have a budget the plan can be checked against before launch: a
 * memory_limit, or a GPU's memory (the planner reads the free memory of the device this
 * node gives rank 0; the job's nodes are taken to be alike). */
static int has_budget(const ds_plan *plan, const ds_jobspec *spec) {
    char device[16];
    ds_engine_opt_format(&DS_ENGINE_OPTS[DS_EO_device], &spec->engine, device, sizeof device);
    return spec->engine.memory_limit > 0 || plan->gpus || !strcmp(device, "cuda") || !strcmp(device, "sim");
}

int ds_plan_memory_check(const ds_plan *plan, const ds_jobspec *spec, ds_err *err) {
    if (!ds_jobspec_is_lua(spec) || !has_budget(plan, spec)) return 0; /* nothing to check */
    FILE *out = tmpfile();
    if (!out) return ds_err_set(err, "memory plan: tmpfile: %s", strerror(errno));
    ds_err why = {{0}};
    int rc = run_planner(plan, spec, 0, fileno(out), &why);
    if (rc == 3) {
        copy_out(out);
        fclose(out);
        return ds_err_set(err, "the memory plan predicts this job does not fit %s (the plan above; "
                               "--no-plan-check launches it anyway)",
                          spec->engine.memory_limit > 0 ? "[engine] memory_limit" : "the device's free memory");
    }
    if (rc != 0) {
        copy_out(out);
        fprintf(stderr, "dslaunch: warning: no memory plan (%s); launching without the check\n",
                rc < 0 ? why.msg : "the planner failed, its output above");
    }
    fclose(out);
    return 0;
}
