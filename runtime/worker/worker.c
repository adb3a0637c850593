/* `dsrun worker [--job ID --rank R] SCRIPT [ARGS...]`: one rank, started by its node's
 * agent. Everything it needs comes from the environment the agent gives it (the --job
 * and --rank arguments only mark the process in the process table). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_clock.h"
#include "ds_context.h"
#include "failure_record.h"
#include "rank_device.h"
#include "kernels.h"
#include "lifeline.h"
#include "metrics_pipe.h"
#include "progress_reporter.h"
#include "comm.h"
#include "program.h"
#include "script.h"
#include "store_client.h"
#include "subcommands.h"

static int env_int(const char *key, int *out, ds_err *err) {
    const char *v = getenv(key);
    if (!v || !v[0]) return ds_err_set(err, "%s is not set (dsrun worker is started by dsrun agent)", key);
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) return ds_err_set(err, "%s=%s is not a valid number", key, v);
    *out = (int)x;
    return 0;
}

static void env_str(const char *key, char *dst, size_t cap, const char *fallback) {
    const char *v = getenv(key);
    snprintf(dst, cap, "%s", v && v[0] ? v : fallback);
}

static int context_from_env(ds_context *ctx, ds_err *err) {
    ds_context_single(ctx);
    if (env_int("RANK", &ctx->rank, err) || env_int("WORLD_SIZE", &ctx->world_size, err) ||
        env_int("LOCAL_RANK", &ctx->local_rank, err) ||
        env_int("LOCAL_WORLD_SIZE", &ctx->local_world_size, err) ||
        env_int("NODE_RANK", &ctx->node_rank, err))
        return -1;
    if (getenv("DS_ATTEMPT") && env_int("DS_ATTEMPT", &ctx->attempt, err)) return -1;
    if (ctx->rank >= ctx->world_size) return ds_err_set(err, "RANK %d >= WORLD_SIZE %d", ctx->rank, ctx->world_size);
    env_str("DS_JOB_ID", ctx->job_id, sizeof ctx->job_id, "local");
    char host[sizeof ctx->host];
    env_str("DS_HOST", host, sizeof host, ctx->host);
    memcpy(ctx->host, host, sizeof host);
    return 0;
}

/* Will this rank's device be a GPU (its communicator NCCL's)? An unusable choice is
 * reported when the device is opened, not here. */
static int on_gpu(const ds_context *ctx) {
    ds_rank_device c;
    ds_err ignored = {{0}};
    return ds_rank_device_choice(ctx, &c, &ignored) == 0 && strcmp(c.kind, "cuda") == 0;
}

/* DS_RDZV is host:port (ds_store_split_addr: an IPv6 host with or without brackets). */
static int connect_store(ds_context *ctx, ds_progress_reporter **reporter, ds_err *err) {
    const char *rdzv = getenv("DS_RDZV");
    if (!rdzv || !rdzv[0]) return 0; /* no store: a world that never meets */
    int timeout_ms = 30000;
    if (getenv("DS_RDZV_TIMEOUT_MS")) env_int("DS_RDZV_TIMEOUT_MS", &timeout_ms, NULL);
    const char *tok = getenv("DS_STORE_TOKEN");
    char token[256];
    snprintf(token, sizeof token, "%s", tok ? tok : "");
    unsetenv("DS_STORE_TOKEN"); /* the script's children need not see it */
    /* Through the node's agent (DS_STORE_SOCKET), which carries every rank's requests on
     * its one connection; the progress reporter's too. */
    ctx->store = ds_store_connect_rank(rdzv, token, timeout_ms, err);
    /* Keys of one attempt never meet those of an earlier one (a restarted job reuses
     * the store). */
    char prefix[32];
    snprintf(prefix, sizeof prefix, "a%d/", ctx->attempt);
    int rc = 0;
    if (!ctx->store || ds_store_set_prefix(ctx->store, prefix, err) != 0) rc = -1;
    /* The NCCL communicator's watch thread asks the store about failed peers while the
     * main thread waits on the GPU (comm_nccl.c): it needs a client of its own. CPU and
     * sim ranks (Gloo) have no watch and keep one connection. */
    if (rc == 0 && ctx->world_size > 1 && on_gpu(ctx) &&
        (!(ctx->watch_store = ds_store_connect_rank(rdzv, token, timeout_ms, err)) ||
         ds_store_set_prefix(ctx->watch_store, prefix, err) != 0))
        rc = -1;
    int progress_ms = 0;
    if (rc == 0 && getenv("DS_PROGRESS_MS") && env_int("DS_PROGRESS_MS", &progress_ms, err) != 0) rc = -1;
    if (rc == 0 && progress_ms > 0) {
        *reporter = ds_progress_reporter_start(rdzv, token, prefix, ctx->rank, progress_ms, err);
        if (!*reporter) rc = -1;
    }
    unsetenv("DS_STORE_SOCKET");
    memset(token, 0, sizeof token);
    return rc == 0 ? 0 : ds_err_prefix(err, "rendezvous %s", rdzv);
}

/* Ranks on one node share its cores: each takes cores / local ranks threads for its
 * kernels (OpenMP and OpenBLAS alike), so 4 ranks on 2 cores do not run 8 spinning
 * threads. OMP_NUM_THREADS, when the user sets it, wins. */
static void share_cores(const ds_context *ctx) {
    if (getenv("OMP_NUM_THREADS")) return;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int per_rank = (int)(cores / (ctx->local_world_size > 0 ? ctx->local_world_size : 1));
    ds_kernels_set_threads(per_rank > 0 ? per_rank : 1);
}

int dsrun_worker_main(int argc, char **argv) {
    int i = 1;
    while (i + 1 < argc && (!strcmp(argv[i], "--job") || !strcmp(argv[i], "--rank"))) i += 2;
    if (i < argc && !strcmp(argv[i], "--exec")) return ds_worker_exec(argc - i - 1, argv + i + 1);
    if (i >= argc) {
        fprintf(stderr, "usage: dsrun worker [--job ID --rank R] SCRIPT.lua [ARGS...]\n"
                        "       dsrun worker [--job ID --rank R] --exec COMMAND [ARGS...]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach the controller as they are printed */
    signal(SIGPIPE, SIG_IGN);         /* a dead peer is an error to handle, not a death */
    ds_err err = {{0}};
    ds_context ctx;
    ds_context_single(&ctx);
    ds_failure_record_open();
    if (ds_lifeline_watch(&err) != 0 || ds_metrics_pipe_open(&err) != 0 || context_from_env(&ctx, &err) != 0) {
        fprintf(stderr, "dsrun worker: %s\n", err.msg);
        ds_failure_record_write(&ctx, "setup", err.msg, NULL, ds_wall_ms(), 0);
        return 1;
    }
    share_cores(&ctx);
    if (ctx.local_rank == 0) { /* once per node: the core is the node's CPU's */
        ds_blas_info b = ds_blas_describe();
        fprintf(stderr, "dsrun worker: OpenBLAS core %s (%s)\n", b.core, b.why);
    }
    ds_progress_reporter *reporter = NULL;
    int no_store = connect_store(&ctx, &reporter, &err) != 0;
    if (no_store || ds_rank_open_device(&ctx, &err) != 0) {
        fprintf(stderr, "%s:rank %d: %s\n", ctx.host, ctx.rank, err.msg);
        /* The store is the controller's: when it cannot be reached, something else failed. */
        ds_failure_record_write(&ctx, "setup", err.msg, NULL, ds_wall_ms(), no_store);
        return 1;
    }
    int rc = ds_script_run(&ctx, argv[i], argc - i - 1, argv + i + 1);
    ds_progress_reporter_stop(reporter);
    if (ds_rank_close_device(&err) != 0) {
        fprintf(stderr, "%s:rank %d: %s\n", ctx.host, ctx.rank, err.msg);
        rc = 1;
    }
    ds_comm_close(ctx.comm); /* opened lazily by the script's first collective */
    if (ctx.store) ds_store_close(ctx.store);
    if (ctx.watch_store) ds_store_close(ctx.watch_store);
    return rc;
}
