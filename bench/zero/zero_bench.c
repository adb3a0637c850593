/* ZeRO memory and step time: for N = 1, 2, 4, 8 ranks (real processes, Gloo over
 * loopback, one thread each) and ZeRO stages 0..3, a GPT (default vocab 512, context
 * 64, 4 layers, d 128: 0.9M parameters) trained with fp32 AdamW; prints the model-state
 * bytes the allocation counters measured on rank 0 after a step against the ZeRO
 * formulas (16Ψ, 8Ψ+8Ψ/N, 4Ψ+12Ψ/N, 16Ψ/N) and the step time relative to stage 0 at
 * the same N; then one JSON object per configuration.
 *
 *   zero_bench LUA_SCRIPT [N,N,...] [repeat=R] [key=value ...]   (key=value go to the
 *   script). Step time: the fastest step of a run, the fastest of R runs per
 *   configuration (the R rounds interleave the stages, so load from other programs
 *   hits all stages alike). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_test_util.h"
#include "script.h"

typedef struct bench_args {
    const char *script;
    int nargs;
    char *args[24];
} bench_args;

static int run_rank(rank_env *env) {
    bench_args *a = env->arg;
    int rc = ds_script_run(&env->ctx, (char *)a->script, a->nargs, a->args);
    if (env->ctx.comm) ds_comm_close(env->ctx.comm);
    return rc;
}

typedef struct row {
    int zero, world;
    long long psi, numel, padded, pb, gb, ob, ppeak, gpeak, cpeak;
    double step_s, loss;
} row;

static int parse(const char *line, row *r) {
    return sscanf(line,
                  "{\"zero\":%d,\"world\":%d,\"params\":%lld,\"flat_elems\":%lld,\"padded_elems\":%lld,"
                  "\"params_bytes\":%lld,\"grads_bytes\":%lld,\"optimizer_bytes\":%lld,"
                  "\"params_peak_bytes\":%lld,\"grads_peak_bytes\":%lld,\"comm_peak_bytes\":%lld,"
                  "\"step_s\":%lf,\"loss\":%lf}",
                  &r->zero, &r->world, &r->psi, &r->numel, &r->padded, &r->pb, &r->gb, &r->ob,
                  &r->ppeak, &r->gpeak, &r->cpeak, &r->step_s, &r->loss) == 13;
}

/* The ZeRO paper's formulas for fp32 Adam (Ψ parameters, N ranks), in bytes. */
static double formula(int zero, double psi, int n) {
    switch (zero) {
    case 0: return 16 * psi;
    case 1: return 8 * psi + 8 * psi / n;
    case 2: return 4 * psi + 12 * psi / n;
    default: return 16 * psi / n;
    }
}

/* What this engine must allocate: the formula on its padded buffers. */
static long long expected(const row *r) {
    long long n = r->numel, p = r->padded, s = r->padded / r->world;
    switch (r->zero) {
    case 0: return 16 * n;
    case 1: return 8 * p + 8 * s;
    case 2: return 4 * p + 12 * s;
    default: return 16 * s;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: zero_bench LUA_SCRIPT [N,N,...] [key=value ...]\n");
        return 2;
    }
    int worlds[8] = {1, 2, 4, 8}, nw = 4, first_kv = 2;
    if (argc > 2 && strchr(argv[2], '=') == NULL) {
        nw = 0;
        for (char *t = strtok(argv[2], ","); t && nw < 8; t = strtok(NULL, ",")) worlds[nw++] = atoi(t);
        first_kv = 3;
    }
    char out[] = "/tmp/zero_bench_XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) return perror("mkstemp"), 1;
    close(fd);
    int repeat = 1;
    if (first_kv < argc && !strncmp(argv[first_kv], "repeat=", 7)) repeat = atoi(argv[first_kv++] + 7);
    if (repeat < 1) repeat = 1;
    row rows[64];
    int nrows = 0;
    for (int wi = 0; wi < nw; wi++) {
      for (int rep = 0; rep < repeat; rep++) {
        for (int z = 0; z <= 3; z++) {
            bench_args a = {.script = argv[1]};
            char zarg[32], oarg[64];
            snprintf(zarg, sizeof zarg, "zero=%d", z);
            snprintf(oarg, sizeof oarg, "out=%s", out);
            a.args[a.nargs++] = zarg;
            a.args[a.nargs++] = oarg;
            for (int i = first_kv; i < argc && a.nargs < 24; i++) a.args[a.nargs++] = argv[i];
            if (run_ranks(worlds[wi], worlds[wi], 120000, 600, run_rank, &a) != 0) {
                fprintf(stderr, "N=%d zero=%d failed\n", worlds[wi], z);
                return 1;
            }
            FILE *f = fopen(out, "r");
            char line[1024];
            row r = {0};
            int got = 0;
            while (f && fgets(line, sizeof line, f)) got = parse(line, &r); /* the last line */
            if (f) fclose(f);
            if (!got) return fprintf(stderr, "N=%d zero=%d: no result\n", worlds[wi], z), 1;
            int at = nrows - 4 + z; /* this configuration's row from an earlier round */
            if (rep == 0) rows[nrows++] = r;
            else if (r.step_s < rows[at].step_s) rows[at].step_s = r.step_s;
            fprintf(stderr, "N=%d zero=%d round %d: %.1f ms\n", worlds[wi], z, rep + 1, r.step_s * 1e3);
        }
      }
    }
    unlink(out);
    printf("ZeRO model-state memory (rank 0, after a step) and step time; Psi = %lld parameters\n",
           rows[0].psi);
    printf("%3s %4s %14s %14s %8s %14s %12s %12s %12s %10s %8s\n", "N", "zero", "formula_B",
           "measured_B", "diff%", "padded_exp_B", "params_B", "grads_B", "optim_B", "step_ms",
           "vs_z0");
    int bad = 0;
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        double f = formula(r->zero, (double)r->psi, r->world);
        long long m = r->pb + r->gb + r->ob, e = expected(r);
        double z0 = r->step_s;
        for (int j = 0; j < nrows; j++)
            if (rows[j].world == r->world && rows[j].zero == 0) z0 = rows[j].step_s;
        printf("%3d %4d %14.0f %14lld %+7.3f%% %14lld %12lld %12lld %12lld %10.2f %7.2fx%s\n",
               r->world, r->zero, f, m, 100.0 * ((double)m - f) / f, e, r->pb, r->gb, r->ob,
               r->step_s * 1e3, r->step_s / z0, m == e ? "" : "  MISMATCH");
        bad += m != e;
    }
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        double z0 = r->step_s;
        for (int j = 0; j < nrows; j++)
            if (rows[j].world == r->world && rows[j].zero == 0) z0 = rows[j].step_s;
        printf("{\"bench\":\"zero\",\"world\":%d,\"zero\":%d,\"params\":%lld,\"formula_bytes\":%.0f,"
               "\"measured_bytes\":%lld,\"expected_padded_bytes\":%lld,\"params_bytes\":%lld,"
               "\"grads_bytes\":%lld,\"optimizer_bytes\":%lld,\"params_peak_bytes\":%lld,"
               "\"grads_peak_bytes\":%lld,\"comm_peak_bytes\":%lld,\"step_ms\":%.3f,"
               "\"step_time_vs_zero0\":%.3f}\n",
               r->world, r->zero, r->psi, formula(r->zero, (double)r->psi, r->world),
               r->pb + r->gb + r->ob, expected(r), r->pb, r->gb, r->ob, r->ppeak, r->gpeak,
               r->cpeak, r->step_s * 1e3, r->step_s / z0);
    }
    return bad ? 1 : 0;
}
