/* What the CPU kernels need from the process environment, and which BLAS kernels they got.
 *
 * libgomp reads OMP_WAIT_POLICY once, when it is loaded, and by default its idle threads
 * spin; on a small machine they starve OpenBLAS's own threads (a profile of the small GPT
 * showed 72% of CPU time in that spin; the passive policy made steps 1.3-3x faster). So
 * unless the user chose a policy, ds_cpu_env_prepare starts the program again with the
 * passive one before any kernel runs.
 *
 * OpenBLAS picks its kernels (its "core") when it is loaded, by CPU model, unless
 * OPENBLAS_CORETYPE names one. A model it does not know gets a generic core (blas_core.c):
 * when the core is below what the CPU's flags support and the user did not set
 * OPENBLAS_CORETYPE, the same restart sets it to the best supported core. The restarted
 * program checks that core's GEMM against a reference (blas_check.c) and, if it fails,
 * warns and starts once more without it. The user's OPENBLAS_CORETYPE always wins: some
 * sites pin an older core because an older OpenBLAS computed wrong results on newer CPUs.
 *
 * dsrun's choice is marked in DS_BLAS_CORE ("dsrun CORE PICKED", or "fallback CORE
 * PICKED" once CORE failed its check), so the restarted program, and the programs it
 * starts, tell dsrun's OPENBLAS_CORETYPE from the user's. A mark counts only while
 * OPENBLAS_CORETYPE agrees with it (CORE for "dsrun", unset for "fallback"); a fallback is
 * never retried, so the program starts at most twice more. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "blas_core.h"
#include "kernels.h"

#define MARK "DS_BLAS_CORE"

typedef struct core_mark {
    enum { MARK_NONE, MARK_DSRUN, MARK_FALLBACK } kind;
    char core[32], picked[32];
} core_mark;

static core_mark read_mark(void) {
    core_mark m = {MARK_NONE, "", ""};
    const char *v = getenv(MARK), *coretype = getenv("OPENBLAS_CORETYPE");
    char kind[16];
    if (!v || sscanf(v, "%15s %31s %31s", kind, m.core, m.picked) != 3) return m;
    if (!strcmp(kind, "dsrun") && coretype && !strcmp(coretype, m.core)) m.kind = MARK_DSRUN;
    if (!strcmp(kind, "fallback") && !coretype) m.kind = MARK_FALLBACK;
    return m;
}

static void set_mark(const char *kind, const char *core, const char *picked) {
    char v[96];
    snprintf(v, sizeof v, "%s %s %s", kind, core, picked);
    setenv(MARK, v, 1);
}

/* Sets OPENBLAS_CORETYPE when OpenBLAS picked a core below the CPU's best; 1 if it did. */
static int choose_core(void) {
    const char *picked = openblas_get_corename();
    const char *best = ds_blas_core_choice(ds_cpu_flags(), picked, getenv("OPENBLAS_CORETYPE"));
    if (!best) return 0;
    set_mark("dsrun", best, picked);
    setenv("OPENBLAS_CORETYPE", best, 1);
    return 1;
}

/* Returns when the core dsrun chose runs and passes the GEMM check; otherwise warns and
 * starts the program again without it (or exits: never compute on a core that failed). */
static void check_chosen_core(const core_mark *m, char **argv, const char *prog) {
    char why[320] = "";
    const char *runs = openblas_get_corename();
    if (!ds_blas_core_supported(ds_cpu_flags(), m->core))
        snprintf(why, sizeof why, "it is not a core dsrun sets for this CPU's flags");
    else if (strcasecmp(runs, m->core))
        snprintf(why, sizeof why, "OpenBLAS runs %s instead", runs);
    else if (ds_blas_check(ds_blas_sgemm, why, sizeof why) == 0)
        return;
    fprintf(stderr,
            "%s: warning: OpenBLAS core %s, which dsrun chose because OpenBLAS picked %s, "
            "failed its check at start: %s; starting again with OpenBLAS's own choice (set "
            "OPENBLAS_CORETYPE to choose a core yourself)\n", prog, m->core, m->picked, why);
    set_mark("fallback", m->core, m->picked);
    unsetenv("OPENBLAS_CORETYPE");
    execv("/proc/self/exe", argv);
    fprintf(stderr, "%s: re-exec without OPENBLAS_CORETYPE failed (%m); stopping rather than "
            "computing on a core that failed its check\n", prog);
    exit(1);
}

void ds_cpu_env_prepare(char **argv, const char *prog) {
    int set_policy = !getenv("OMP_WAIT_POLICY"), set_core = 0;
    if (set_policy) setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    core_mark m = read_mark();
    if (m.kind == MARK_NONE) {
        unsetenv(MARK); /* a stale mark: the user changed OPENBLAS_CORETYPE since */
        set_core = choose_core();
    }
    if (set_policy || set_core) {
        execv("/proc/self/exe", argv);
        fprintf(stderr, "%s: re-exec to set%s%s failed (%m); continuing without (set %s yourself "
                "to silence this)\n", prog, set_policy ? " OMP_WAIT_POLICY=PASSIVE" : "",
                set_core ? " OPENBLAS_CORETYPE" : "",
                set_policy ? "OMP_WAIT_POLICY" : "OPENBLAS_CORETYPE");
        if (set_core) {
            unsetenv("OPENBLAS_CORETYPE");
            unsetenv(MARK);
        }
    }
    /* This program runs on with a core dsrun chose (here, before a restart, or in the
     * program that started this one): it must pass the check first. */
    if (m.kind == MARK_DSRUN) check_chosen_core(&m, argv, prog);
}

static const char *const REASON_NAMES[] = {[DS_BLAS_OPENBLAS] = "openblas",
                                           [DS_BLAS_USER] = "user",
                                           [DS_BLAS_IGNORED] = "ignored",
                                           [DS_BLAS_DSRUN] = "dsrun",
                                           [DS_BLAS_FALLBACK] = "fallback"};

ds_blas_info ds_blas_describe(void) {
    ds_blas_info b = {.core = openblas_get_corename(), .config = openblas_get_config(),
                      .coretype = getenv("OPENBLAS_CORETYPE")};
    b.forced = b.coretype && !strcasecmp(b.coretype, b.core);
    b.cpu_core = ds_blas_core_best(ds_cpu_flags());
    core_mark m = read_mark();
    if (m.kind == MARK_DSRUN && b.forced) {
        b.reason = DS_BLAS_DSRUN;
        snprintf(b.openblas_core, sizeof b.openblas_core, "%s", m.picked);
        snprintf(b.why, sizeof b.why, "chosen by dsrun: OpenBLAS picked %s, below this CPU's %s",
                 m.picked, m.core);
    } else if (m.kind == MARK_FALLBACK) {
        b.reason = DS_BLAS_FALLBACK;
        snprintf(b.openblas_core, sizeof b.openblas_core, "%s", m.picked);
        snprintf(b.tried, sizeof b.tried, "%s", m.core);
        snprintf(b.why, sizeof b.why, "OpenBLAS's choice: dsrun's %s failed its check at start",
                 m.core);
    } else if (!b.coretype) {
        b.reason = DS_BLAS_OPENBLAS;
        snprintf(b.why, sizeof b.why, "OpenBLAS's choice for this CPU");
    } else if (b.forced) {
        b.reason = DS_BLAS_USER;
        snprintf(b.why, sizeof b.why, "forced by the user's OPENBLAS_CORETYPE");
    } else {
        b.reason = DS_BLAS_IGNORED;
        snprintf(b.why, sizeof b.why, "OpenBLAS's choice: it did not take OPENBLAS_CORETYPE=%.120s",
                 b.coretype);
    }
    b.reason_name = REASON_NAMES[b.reason];
    return b;
}
