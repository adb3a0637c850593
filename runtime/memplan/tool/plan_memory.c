/* `dsrun plan-memory [OPTIONS] SCRIPT.lua [ARGS...]`: runs the script with the ds library
 * in its shapes-only mode (lua/ds/memplan.lua): stages are described, not allocated, and
 * the model's first train_step prints each rank's predicted peak per category with the
 * formula of every line, then ends the script. Exit status: 0 the job fits (or no limit
 * is known), 3 it does not, 1 the script failed before planning, 2 usage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "comm.h"
#include "rank_device.h"
#include "script.h"
#include "subcommands.h"

static const char *USAGE =
    "usage: dsrun plan-memory [--world N] [--local-world N] [--all] [--limit BYTES] [--device cpu|cuda]\n"
    "                         [--allow-fp16] SCRIPT.lua [ARGS...]\n"
    "  --world N        data-parallel ranks the job runs on (default 1)\n"
    "  --local-world N  ranks per node (default: --world)\n"
    "  --all            every combination of ZeRO, checkpointing and precision that matters,\n"
    "                   its cost, and the fastest that fits\n"
    "  --limit BYTES    per-rank memory to plan for (default: [engine] memory_limit; without\n"
    "                   one, on a GPU (cuda, sim): its free memory; on a cpu: none)\n"
    "  --device KIND    where the ranks compute (cuda: inputs copied to the device,\n"
    "                   collectives without Gloo's ring); default: this node's\n"
    "  --allow-fp16     let the recommendation use fp16 (it changes numerics)\n";

static int set(const char *name, const char *value) {
    if (setenv(name, value, 1) != 0) return perror("setenv"), -1;
    return 0;
}

int dsrun_plan_memory_main(int argc, char **argv) {
    ds_context ctx;
    ds_context_single(&ctx);
    const char *mode = "report";
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--all")) {
            mode = "all";
        } else if (!strcmp(a, "--allow-fp16")) {
            if (set("DS_PLAN_ALLOW_FP16", "1")) return 1;
        } else if ((!strcmp(a, "--world") || !strcmp(a, "--local-world")) && v) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1 << 20)
                return fprintf(stderr, "dsrun plan-memory: %s %s: expected a count >= 1\n", a, v), 2;
            if (!strcmp(a, "--world")) ctx.world_size = (int)n;
            else ctx.local_world_size = (int)n;
            i++;
        } else if (!strcmp(a, "--limit") && v) {
            if (set("DS_ENGINE_MEMORY_LIMIT", v)) return 1;
            i++;
        } else if (!strcmp(a, "--device") && v) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda"))
                return fprintf(stderr, "dsrun plan-memory: --device %s: cpu or cuda\n", v), 2;
            if (set("DS_PLAN_DEVICE", v)) return 1;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            return fputs(USAGE, stdout) < 0;
        } else {
            return fprintf(stderr, "dsrun plan-memory: unknown option %s\n%s", a, USAGE), 2;
        }
    }
    if (i >= argc) return fputs(USAGE, stderr), 2;
    if (ctx.local_world_size == 1 && ctx.world_size > 1) ctx.local_world_size = ctx.world_size;
    if (set("DS_PLAN_MEMORY", mode)) return 1;
    /* The plan runs on the host: its measurements (GEMM speed) are this node's. */
    ds_err err = {{0}};
    if (ds_rank_open_device(&ctx, &err) != 0) {
        fprintf(stderr, "dsrun plan-memory: %s\n", err.msg);
        return 1;
    }
    /* The limit is what the plan is checked against, not this process's own budget (it
     * measures the node's GEMM speed with real tensors). */
    ds_mem_set_limit(0);
    int rc = ds_script_run(&ctx, argv[i], argc - i - 1, argv + i + 1);
    if (ds_rank_close_device(&err) != 0) rc = 1;
    ds_comm_close(ctx.comm);
    if (rc == 0) {
        /* The plan ends the script from its first train_step; a script that got here
         * never trained. */
        fprintf(stderr, "dsrun plan-memory: %s ended without a model:train_step or model:forward "
                        "to take the batch's shapes from\n", argv[i]);
        return 1;
    }
    return rc;
}
