/* One knob for the CPU kernels' parallelism: OpenMP loops and OpenBLAS GEMMs share the
 * same cores, so they are set together. */
#include <omp.h>

#include "kernels.h"

void openblas_set_num_threads(int num_threads);

static int g_threads; /* 0: library default */

void ds_kernels_set_threads(int n) {
    g_threads = n > 0 ? n : 0;
    if (n > 0) {
        omp_set_num_threads(n);
        openblas_set_num_threads(n);
    }
}

int ds_kernels_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }
