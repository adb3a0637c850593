/* dsrun: the per-node runtime. Dispatches to a subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "subcommands.h"
#ifdef DS_HAVE_CUDA
#include "kernels_cuda.h"
#endif

static const char *USAGE =
    "usage: dsrun <command> [args]\n"
    "  run SCRIPT.lua [ARGS...]     run a script as one rank, no launcher\n"
    "  tokenize IN.txt OUT.tok      byte-level tokenizer: text -> token file\n"
    "  ckpt export|inspect ...      state checkpoints\n"
    "  agent | worker               started by dslaunch, not by hand\n"
    "  --devices                    list CUDA devices\n"
    "  --version | --help\n";

static int list_devices(void) {
#ifdef DS_HAVE_CUDA
    char why[256] = "";
    int cudart, cublas, nccl;
    ds_cuda_versions(&cudart, &cublas, &nccl);
    printf("built with CUDA runtime %d, cuBLAS %d, NCCL %d\n", cudart, cublas, nccl);
    int n = ds_cuda_device_count(why, sizeof why);
    if (n == 0) {
        printf("no CUDA devices: %s\n", why[0] ? why : "none visible");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        ds_cuda_device d;
        if (ds_cuda_device_info(i, &d, why, sizeof why) != 0) {
            fprintf(stderr, "dsrun: %s\n", why);
            return 1;
        }
        printf("%d: %s, %.1f GiB, sm_%d%d, %d SMs\n", d.index, d.name,
               (double)d.total_mem / (1 << 30), d.cc_major, d.cc_minor, d.multiprocessors);
    }
    return 0;
#else
    printf("built without CUDA: no CUDA devices\n");
    return 0;
#endif
}

/* libgomp reads OMP_WAIT_POLICY once, when it is loaded, and by default its idle threads
 * spin; on a small machine they starve OpenBLAS's own threads (a profile of the small
 * GPT showed 72% of CPU time in that spin; the passive policy made steps 1.3-3x
 * faster). So unless the user chose a policy, dsrun starts itself again with the
 * passive one before any kernel runs. */
static void ensure_passive_openmp(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
    perror("dsrun: re-exec with OMP_WAIT_POLICY=PASSIVE failed; continuing with spinning "
           "OpenMP threads (set OMP_WAIT_POLICY yourself to silence this)");
}

int main(int argc, char **argv) {
    ensure_passive_openmp(argv);
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("dsrun %s\n", DS_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "--devices")) return list_devices();
    if (!strcmp(cmd, "run")) return dsrun_run_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "agent")) return dsrun_agent_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "worker")) return dsrun_worker_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return dsrun_tokenize_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "ckpt")) return dsrun_ckpt_main(argc - 1, argv + 1);
    fprintf(stderr, "dsrun: unknown command '%s'\n%s", cmd, USAGE);
    return 2;
}
