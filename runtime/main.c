/* dsrun: the per-node runtime. Dispatches to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blas_core.h"
#include "ds_gpu.h"
#include "kernels.h"
#include "rank_device.h"
#include "subcommands.h"
#ifdef DS_HAVE_CUDA
#include "cuda_module.h"
#endif

static const char *USAGE =
    "usage: dsrun <command> [args]\n"
    "  run SCRIPT.lua [ARGS...]     run a script as one rank, no launcher\n"
    "  tokenize IN.txt OUT.tok      byte-level tokenizer: text -> token file\n"
    "  ckpt export|inspect ...      state checkpoints\n"
    "  plan-memory SCRIPT.lua ...   predicted memory per rank, every choice, the fastest that fits\n"
    "  agent | worker               started by dslaunch, not by hand\n"
    "  --devices                    list CUDA devices\n"
    "  --blas                       OpenBLAS's build, the kernels it runs (its core) and why\n"
    "  --version | --help\n";

static int list_gpus(void) {
#ifdef DS_HAVE_CUDA
    char why[256] = "";
    int cudart, cublas, nccl;
    ds_err err = {{0}};
    const ds_cuda_module *m = ds_cuda_module_get(&err); /* the GPUs are listed either way */
    if (m) m->versions(&cudart, &cublas, &nccl);
    if (m) printf("built with CUDA runtime %d, cuBLAS %d, NCCL %d\n", cudart, cublas, nccl);
    else fprintf(stderr, "dsrun: %s\n", err.msg);
    int n = ds_gpu_count(why, sizeof why);
    if (n == 0) printf("no CUDA devices: %s\n", why[0] ? why : "none visible");
    for (int i = 0; i < n; i++) {
        ds_gpu d;
        if (ds_gpu_info(i, &d, why, sizeof why) != 0) {
            fprintf(stderr, "dsrun: %s\n", why);
            return 1;
        }
        printf("%d: %s, %.1f GiB, sm_%d%d, %d SMs\n", d.index, d.name,
               (double)d.total_mem / (1 << 30), d.cc_major, d.cc_minor, d.multiprocessors);
    }
    if (!m) return 1;
#else
    printf("built without CUDA: no CUDA devices\n");
#endif
    return 0;
}

/* The GPUs, then the device a rank started here would compute on (docs/devices.md). */
static int list_devices(void) {
    if (list_gpus() != 0) return 1;
    ds_context ctx;
    ds_context_single(&ctx);
    const char *lr = getenv("LOCAL_RANK");
    if (lr) ctx.local_rank = atoi(lr);
    ds_rank_device c;
    ds_err err = {{0}};
    if (ds_rank_device_choice(&ctx, &c, &err) != 0) {
        fprintf(stderr, "dsrun: %s\n", err.msg);
        return 1;
    }
    printf("engine device: %s (DS_ENGINE_DEVICE / [engine] device = %s)\n", c.kind, c.asked);
    return 0;
}

/* OpenBLAS's build, the core it runs and why, and the best core this CPU supports. */
static int describe_blas(void) {
    ds_blas_info b = ds_blas_describe();
    char flags[160];
    ds_cpu_flags_names(ds_cpu_flags(), flags, sizeof flags);
    printf("%s\ncore %s (%s)\n", b.config, b.core, b.why);
    printf("cpu %s (flags: %s)\n", b.cpu_core ? b.cpu_core : "-", flags[0] ? flags : "-");
    return 0;
}

static int print_help(void) { return fputs(USAGE, stdout) < 0; }

static int print_version(void) {
    printf("dsrun %s\n", DS_VERSION);
    return 0;
}

/* The options that are whole commands and take nothing after them. */
static const struct {
    const char *name;
    int (*run)(void);
} OPTIONS[] = {{"--help", print_help},        {"-h", print_help},
               {"--version", print_version},  {"--devices", list_devices},
               {"--blas", describe_blas}};

int main(int argc, char **argv) {
    ds_cpu_env_prepare(argv, "dsrun");
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof OPTIONS / sizeof OPTIONS[0]; i++) {
        if (strcmp(cmd, OPTIONS[i].name)) continue;
        if (argc > 2) {
            fprintf(stderr, "dsrun: %s takes no arguments (got '%s')\n", cmd, argv[2]);
            return 2;
        }
        return OPTIONS[i].run();
    }
    if (!strcmp(cmd, "run")) return dsrun_run_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "agent")) return dsrun_agent_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker")) return dsrun_worker_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return dsrun_tokenize_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return dsrun_ckpt_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan-memory")) return dsrun_plan_memory_main(argc - 1, argv + 1);
    fprintf(stderr, "dsrun: unknown command '%s'\n%s", cmd, USAGE);
    return 2;
}
