/* The OpenBLAS core decision on a table of CPUs (their flags and the core OpenBLAS
 * picked), and the start-up GEMM check: it passes on OpenBLAS's sgemm and catches sgemms
 * that are wrong only at an edge. Machine-independent: no case reads this CPU. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "blas_core.h"

#define AVX2_FMA (DS_CPU_AVX | DS_CPU_AVX2 | DS_CPU_FMA)
#define AVX512 (AVX2_FMA | DS_CPU_AVX512F | DS_CPU_AVX512BW | DS_CPU_AVX512VL | DS_CPU_AVX512DQ)
#define AVX512_BF16 (AVX512 | DS_CPU_AVX512BF16)

static void decides_by_flags_and_the_picked_core(void **state) {
    (void)state;
    static const struct {
        const char *cpu;
        unsigned flags;
        const char *picked, *user, *want; /* want NULL: keep what runs */
    } cases[] = {
        /* OpenBLAS 0.3.21 does not know the model and runs its generic core */
        {"Xeon 6/207 (AVX-512, BF16, FP16)", AVX512_BF16, "Prescott", NULL, "Cooperlake"},
        {"Xeon with AVX-512, no BF16", AVX512, "Prescott", NULL, "SkylakeX"},
        {"AVX-512F without BW", AVX2_FMA | DS_CPU_AVX512F, "Prescott", NULL, "Haswell"},
        {"AVX2 Intel seen as Nehalem", AVX2_FMA, "Nehalem", NULL, "Haswell"},
        {"AVX2 without FMA", DS_CPU_AVX | DS_CPU_AVX2, "Prescott", NULL, "Sandybridge"},
        {"AVX-512 CPU on Haswell's kernels", AVX512, "Haswell", NULL, "SkylakeX"},
        {"AVX-512 BF16 CPU on SkylakeX's", AVX512_BF16, "SkylakeX", NULL, "Cooperlake"},
        {"AVX-512 CPU on Zen's", AVX512_BF16, "Zen", NULL, "Cooperlake"},
        {"the picked name in other case", AVX512, "prescott", NULL, "SkylakeX"},
        /* OpenBLAS's choice is already the best the flags allow */
        {"Zen 1 (AVX2)", AVX2_FMA, "Zen", NULL, NULL},
        {"Haswell", AVX2_FMA, "Haswell", NULL, NULL},
        {"Zen 4 on Cooperlake", AVX512_BF16, "Cooperlake", NULL, NULL},
        {"Zen 5 on Cooperlake", AVX512_BF16, "Cooperlake", NULL, NULL},
        {"Skylake-SP", AVX512, "SkylakeX", NULL, NULL},
        {"SSE-only CPU", 0, "Prescott", NULL, NULL},
        {"a core above the flags: not ours to lower", AVX2_FMA, "SkylakeX", NULL, NULL},
        /* a name the table does not know is not second-guessed */
        {"a newer OpenBLAS's core", AVX512_BF16, "SapphireRapids", NULL, NULL},
        {"OpenBLAS's Unknown", AVX512_BF16, "Unknown", NULL, NULL},
        {"no name", AVX512_BF16, NULL, NULL, NULL},
        /* the user's OPENBLAS_CORETYPE always wins, taken or not */
        {"forced Haswell on Zen 5", AVX512_BF16, "Haswell", "Haswell", NULL},
        {"forced Prescott on a Xeon", AVX512_BF16, "Prescott", "Prescott", NULL},
        {"forced name OpenBLAS ignored", AVX512_BF16, "Prescott", "SapphireRapids", NULL},
        {"forced empty", AVX512_BF16, "Prescott", "", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = ds_blas_core_choice(cases[i].flags, cases[i].picked, cases[i].user);
        if (!got != !cases[i].want || (got && strcmp(got, cases[i].want)))
            fail_msg("%s: picked %s, user %s: got %s, want %s", cases[i].cpu,
                     cases[i].picked ? cases[i].picked : "(none)",
                     cases[i].user ? cases[i].user : "(unset)", got ? got : "keep",
                     cases[i].want ? cases[i].want : "keep");
        /* what dsrun sets, the restarted program accepts on the same CPU */
        if (got) assert_true(ds_blas_core_supported(cases[i].flags, got));
    }
}

static void names_the_best_core_and_what_it_vouches_for(void **state) {
    (void)state;
    assert_string_equal(ds_blas_core_best(AVX512_BF16), "Cooperlake");
    assert_string_equal(ds_blas_core_best(AVX512), "SkylakeX");
    assert_string_equal(ds_blas_core_best(AVX2_FMA), "Haswell");
    assert_string_equal(ds_blas_core_best(DS_CPU_AVX), "Sandybridge");
    assert_null(ds_blas_core_best(0));
    assert_null(ds_blas_core_best(DS_CPU_AVX2 | DS_CPU_FMA)); /* AVX2 without AVX: bogus */
    /* a core passed on to another machine: only what its flags support, only dsrun's */
    assert_true(ds_blas_core_supported(AVX512_BF16, "SkylakeX"));
    assert_true(ds_blas_core_supported(AVX512_BF16, "haswell"));
    assert_false(ds_blas_core_supported(AVX512, "Cooperlake"));
    assert_false(ds_blas_core_supported(AVX2_FMA, "SkylakeX"));
    assert_false(ds_blas_core_supported(AVX512_BF16, "Bulldozer")); /* FMA4: SIGILL on Zen */
    assert_false(ds_blas_core_supported(AVX512_BF16, "Prescott"));
    assert_false(ds_blas_core_supported(AVX512_BF16, "SapphireRapids"));
    assert_false(ds_blas_core_supported(AVX512_BF16, NULL));
    char names[160];
    ds_cpu_flags_names(AVX2_FMA | DS_CPU_AVX512BF16, names, sizeof names);
    assert_string_equal(names, "avx avx2 fma avx512_bf16");
    ds_cpu_flags_names(0, names, sizeof names);
    assert_string_equal(names, "");
    ds_cpu_flags_names(AVX512_BF16, names, 12); /* truncated, still a string */
    assert_string_equal(names, "avx avx2 fm");
}

static void check_passes_openblas_sgemm(void **state) {
    (void)state;
    char why[320] = "";
    if (ds_blas_check(ds_blas_sgemm, why, sizeof why) != 0) fail_msg("%s", why);
}

/* Wrong sgemms: each right everywhere but at one kind of edge. */
static int g_mode;
static void broken_sgemm(int ta, int tb, int M, int N, int K, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    ds_blas_sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (g_mode == 0 && M % 2 && N > 1) C[(size_t)(M - 1) * ldc + N - 1] += 0.01f; /* last tail */
    if (g_mode == 1 && ta && tb) C[0] = -C[0] + 1.0f;                          /* one case */
    if (g_mode == 2 && beta == 0.0f && M > 1) C[ldc] = NAN;                      /* read NaN */
    if (g_mode == 3 && K == 1) C[0] *= 1.0f + 1e-3f;                           /* K = 1 only */
}

static void check_catches_edge_errors(void **state) {
    (void)state;
    for (g_mode = 0; g_mode < 4; g_mode++) {
        char why[320] = "";
        assert_int_equal(ds_blas_check(broken_sgemm, why, sizeof why), -1);
        assert_non_null(strstr(why, "the reference"));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decides_by_flags_and_the_picked_core),
        cmocka_unit_test(names_the_best_core_and_what_it_vouches_for),
        cmocka_unit_test(check_passes_openblas_sgemm),
        cmocka_unit_test(check_catches_edge_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
