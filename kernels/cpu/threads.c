/* One knob for the CPU kernels' parallelism. There is one thread pool, OpenMP's: OpenBLAS
 * is kept single-threaded and the GEMMs are split across the OpenMP threads (matmul.c),
 * so two pools never spin against each other on the same cores. */
#include <omp.h>

#include "kernels.h"

void openblas_set_num_threads(int num_threads);

static int g_threads;     /* 0: library default */
static int g_omp_default; /* remembered before the first change */

void ds_kernels_set_threads(int n) {
    if (g_omp_default == 0) g_omp_default = omp_get_max_threads();
    g_threads = n > 0 ? n : 0;
    omp_set_num_threads(n > 0 ? n : g_omp_default);
    openblas_set_num_threads(1);
}

int ds_kernels_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }
