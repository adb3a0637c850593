/* What the CPU kernels need from the process environment, and which BLAS kernels they got.
 *
 * libgomp reads OMP_WAIT_POLICY once, when it is loaded, and by default its idle threads
 * spin; on a small machine they starve OpenBLAS's own threads (a profile of the small GPT
 * showed 72% of CPU time in that spin; the passive policy made steps 1.3-3x faster). So
 * unless the user chose a policy, ds_cpu_env_prepare starts the program again with the
 * passive one before any kernel runs.
 *
 * OpenBLAS picks its kernels (its "core") by CPU when it is loaded, unless
 * OPENBLAS_CORETYPE names one. That choice is left to OpenBLAS and the user: some sites
 * pin an older core because an older OpenBLAS computes wrong results on newer CPUs. It
 * decides GEMM speed (2x between Haswell's and SkylakeX's kernels on an AVX-512 CPU), so
 * ds_blas_describe reports it for benchmarks and logs. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "kernels.h"

void ds_cpu_env_prepare(char **argv, const char *prog) {
    if (getenv("OMP_WAIT_POLICY")) return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr,
            "%s: re-exec with OMP_WAIT_POLICY=PASSIVE failed (%m); continuing with spinning "
            "OpenMP threads (set OMP_WAIT_POLICY yourself to silence this)\n", prog);
}

ds_blas_info ds_blas_describe(void) {
    ds_blas_info info = {openblas_get_corename(), openblas_get_config(),
                         getenv("OPENBLAS_CORETYPE"), 0};
    info.forced = info.coretype && !strcasecmp(info.coretype, info.core);
    return info;
}
