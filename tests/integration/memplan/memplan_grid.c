/* The memory planner's grid test: for each case, W real processes (Gloo on loopback) run
 * memplan_grid.lua, which trains a GPT two steps and checks the planner's prediction for
 * its stages against the allocation counters, every category and the total peak to the
 * byte. The grid: ZeRO 0-3 x checkpointing none/full/every:2 x
 * fp32/bf16, the same on every stage, at worlds 1, 2 and 4 (the tiny GPT), the small GPT
 * at world 2, mixes across stages, and fp32 and bf16 with dropout.
 *
 *   memplan_grid SCRIPT [FILTER]   FILTER: run only cases whose name contains it
 *   memplan_grid SCRIPT --world W [key=value ...]   one case, the arguments the script's
 *                                  (bench/memplan/run.sh) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_test_util.h"
#include "rank_device.h"
#include "script.h"

typedef struct grid_args {
    const char *script;
    int nargs;
    char *args[12];
} grid_args;

static int run_rank(rank_env *env) {
    grid_args *a = env->arg;
    ds_err err = {{0}};
    if (ds_rank_open_device(&env->ctx, &err) != 0) {
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        return 1;
    }
    int rc = ds_script_run(&env->ctx, a->script, a->nargs, a->args);
    if (ds_rank_close_device(&err) != 0) {
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        rc = 1;
    }
    if (env->ctx.comm) ds_comm_close(env->ctx.comm);
    return rc;
}

typedef struct grid_case {
    int world;
    const char *size, *zero, *checkpoint, *precision;
    const char *dropout; /* NULL: none */
} grid_case;

/* 0 passed, 1 failed, -1 left out by the filter. */
static int run_case(const char *script, const grid_case *c, const char *filter) {
    char name[160];
    snprintf(name, sizeof name, "%s_w%d_z%s_c%s_%s%s%s", c->size, c->world, c->zero,
             c->checkpoint, c->precision, c->dropout ? "_dropout" : "",
             c->dropout ? c->dropout : "");
    if (filter && !strstr(name, filter)) return -1; /* not run */
    char args[6][200];
    snprintf(args[0], sizeof args[0], "name=%s", name);
    snprintf(args[1], sizeof args[1], "size=%s", c->size);
    snprintf(args[2], sizeof args[2], "zero=%s", c->zero);
    snprintf(args[3], sizeof args[3], "checkpoint=%s", c->checkpoint);
    snprintf(args[4], sizeof args[4], "precision=%s", c->precision);
    snprintf(args[5], sizeof args[5], "dropout=%s", c->dropout ? c->dropout : "0");
    grid_args a = {.script = script, .nargs = 6};
    for (int i = 0; i < 6; i++) a.args[i] = args[i];
    int failed = run_ranks(c->world, c->world, 60000, 120, run_rank, &a);
    if (failed) fprintf(stderr, "FAIL %s: %d of %d ranks\n", name, failed, c->world);
    fflush(stdout);
    return failed != 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: memplan_grid SCRIPT [FILTER]\n");
        return 2;
    }
    if (argc > 3 && !strcmp(argv[2], "--world")) {
        grid_args a = {.script = argv[1]};
        for (int i = 4; i < argc && a.nargs < 12; i++) a.args[a.nargs++] = argv[i];
        int w = atoi(argv[3]);
        if (w < 1) return fprintf(stderr, "--world %s: a count >= 1\n", argv[3]), 2;
        return run_ranks(w, w, 600000, 3600, run_rank, &a) != 0;
    }
    const char *filter = argc > 2 ? argv[2] : NULL;
    static const char *const zeros[] = {"0", "1", "2", "3"};
    static const char *const ckpts[] = {"none", "full", "every:2"};
    static const char *const precs[] = {"fp32", "bf16"};
    static const int worlds[] = {1, 2, 4};
    int bad = 0, n = 0;
    for (int w = 0; w < 3; w++)
        for (int z = 0; z < 4; z++)
            for (int k = 0; k < 3; k++)
                for (int p = 0; p < 2; p++) {
                    grid_case c = {worlds[w], "tiny", zeros[z], ckpts[k], precs[p], NULL};
                    int rc = run_case(argv[1], &c, filter);
                    if (rc >= 0) bad += rc, n++;
                }
    /* The small GPT, choices mixed across the stages (embed, blocks, head), and dropout
     * (the Dropout layers' masks, none stored where a Dropout fuses into its Residual's
     * add; attention's keeps its lse, the 16-bit dqkv given to c_attn's backward as
     * without dropout). */
    static const grid_case more[] = {
        {2, "small", "0", "none", "fp32", NULL},        {2, "small", "3", "full", "bf16", NULL},
        {2, "small", "2", "every:2", "bf16", NULL},     {4, "small", "1", "none", "fp32", NULL},
        {2, "tiny", "0,3,1", "none,full,none", "fp32,bf16,fp32", NULL},
        {4, "tiny", "3,2,0", "none,every:2,full", "bf16,fp32,bf16", NULL},
        {2, "small", "1,3,2", "full,none,every:2", "bf16,bf16,fp32", NULL},
        {1, "small", "2,0,3", "every:2,full,none", "fp32,bf16,bf16", NULL},
        {2, "small", "0", "none", "bf16", "0.1"},       {1, "tiny", "3", "every:2", "bf16", "0.1"},
        {1, "small", "0", "none", "fp32", "0.1"},       {2, "small", "1", "full", "fp32", "0.1"},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        int rc = run_case(argv[1], &more[i], filter);
        if (rc >= 0) bad += rc, n++;
    }
    printf("%d of %d cases within the planner's bounds\n", n - bad, n);
    return bad != 0 || n == 0;
}
