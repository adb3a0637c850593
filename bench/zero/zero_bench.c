/* ZeRO memory and step time: for N = 1, 2, 4, 8 ranks (real processes, Gloo over
 * loopback, one thread each) and ZeRO stages 0..3, a GPT (default vocab 512, context
 * 64, 4 layers, d 128: 0.9M parameters) trained with AdamW, every stage in one
 * precision; prints the model-state bytes the allocation counters measured on rank 0
 * after a step against the ZeRO paper's formulas and the step time relative to stage 0
 * at the same N and precision; then one JSON object per configuration.
 *
 *   zero_bench LUA_SCRIPT [N,N,...] [repeat=R] [precision=P,P,...] [key=value ...]
 *
 * precision: fp32 (default), bf16, fp16, or a list (precision=fp32,bf16 runs both and
 * prints one table each). Bytes per parameter: fp32 keeps 4 params + 4 grads + 8 Adam
 * moments (16Ψ, 8Ψ+8Ψ/N, 4Ψ+12Ψ/N, 16Ψ/N); a 16-bit stage 2 params + 2 grads + 12 in
 * the optimizer (fp32 master + moments: 16Ψ, 4Ψ+12Ψ/N, 2Ψ+14Ψ/N, 16Ψ/N). Other key=value
 * go to the script. Step time: the fastest step of a run, the fastest of R runs per
 * configuration (the R rounds interleave the stages, so load from other programs hits
 * all stages alike). Exit status 1 when a measurement differs from the formula on the
 * padded sizes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_test_util.h"
#include "rank_device.h"
#include "script.h"

typedef struct bench_args {
    const char *script;
    int nargs;
    char *args[24];
} bench_args;

static int run_rank(rank_env *env) {
    bench_args *a = env->arg;
    ds_err err = {{0}};
    if (ds_rank_open_device(&env->ctx, &err) != 0) { /* DS_ENGINE_DEVICE, as a worker */
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        return 1;
    }
    int rc = ds_script_run(&env->ctx, (char *)a->script, a->nargs, a->args);
    if (ds_rank_close_device(&err) != 0) {
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        rc = 1;
    }
    if (env->ctx.comm) ds_comm_close(env->ctx.comm);
    return rc;
}

typedef struct row {
    int zero, world, skipped;
    char prec[8];
    long long psi, numel, padded, pb, gb, ob, ppeak, gpeak, cpeak;
    double step_s, loss;
} row;

static int parse(const char *line, row *r) {
    return sscanf(line,
                  "{\"zero\":%d,\"world\":%d,\"precision\":\"%7[^\"]\",\"params\":%lld,\"flat_elems\":%lld,\"padded_elems\":%lld,"
                  "\"params_bytes\":%lld,\"grads_bytes\":%lld,\"optimizer_bytes\":%lld,"
                  "\"params_peak_bytes\":%lld,\"grads_peak_bytes\":%lld,\"comm_peak_bytes\":%lld,"
                  "\"step_s\":%lf,\"loss\":%lf,\"skipped\":%d}",
                  &r->zero, &r->world, r->prec, &r->psi, &r->numel, &r->padded, &r->pb, &r->gb,
                  &r->ob, &r->ppeak, &r->gpeak, &r->cpeak, &r->step_s, &r->loss, &r->skipped) == 15;
}

/* Model-state bytes per element: the working copy, its gradient, the optimizer's
 * (fp32: Adam's two moments; 16-bit: an fp32 master besides them). */
typedef struct state_bytes {
    int params, grads, optim;
} state_bytes;

static state_bytes bytes_of(const char *prec) {
    if (!strcmp(prec, "fp32")) return (state_bytes){4, 4, 8};
    return (state_bytes){2, 2, 12};
}

/* Model-state bytes at ZeRO stage `zero`: stage 1 shards the optimizer state, 2 the
 * gradients too, 3 the parameters too; `full` elements are held whole, `shard` per rank. */
static double state_total(state_bytes b, int zero, double full, double shard) {
    double all = b.params + b.grads + b.optim;
    switch (zero) {
    case 0: return all * full;
    case 1: return (b.params + b.grads) * full + b.optim * shard;
    case 2: return b.params * full + (b.grads + b.optim) * shard;
    default: return all * shard;
    }
}

/* The ZeRO paper's formulas (Ψ parameters, N ranks), in bytes. */
static double formula(const row *r) {
    double psi = (double)r->psi;
    return state_total(bytes_of(r->prec), r->zero, psi, psi / r->world);
}

/* What this engine must allocate: the formula on its padded buffers (ZeRO-0 holds the
 * unpadded flat buffer). */
static long long expected(const row *r) {
    long long full = r->zero == 0 ? r->numel : r->padded;
    return (long long)state_total(bytes_of(r->prec), r->zero, (double)full,
                                  (double)(r->padded / r->world));
}

/* Step time of ZeRO-0 at the same world and precision. */
static double zero0_step(const row *rows, int nrows, const row *r) {
    for (int j = 0; j < nrows; j++)
        if (rows[j].world == r->world && rows[j].zero == 0 && !strcmp(rows[j].prec, r->prec))
            return rows[j].step_s;
    return r->step_s;
}

/* One table per precision; returns the number of mismatches. */
static int print_table(const row *rows, int nrows, const char *prec) {
    state_bytes b = bytes_of(prec);
    printf("ZeRO model-state memory (rank 0, after a step) and step time; %s (%d+%d+%d bytes per "
           "parameter); Psi = %lld parameters\n", prec, b.params, b.grads, b.optim, rows[0].psi);
    printf("%3s %4s %14s %14s %8s %14s %12s %12s %12s %10s %8s\n", "N", "zero", "formula_B",
           "measured_B", "diff%", "padded_exp_B", "params_B", "grads_B", "optim_B", "step_ms",
           "vs_z0");
    int bad = 0;
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (strcmp(r->prec, prec)) continue;
        double f = formula(r);
        long long m = r->pb + r->gb + r->ob, e = expected(r);
        printf("%3d %4d %14.0f %14lld %+7.3f%% %14lld %12lld %12lld %12lld %10.2f %7.2fx%s\n",
               r->world, r->zero, f, m, 100.0 * ((double)m - f) / f, e, r->pb, r->gb, r->ob,
               r->step_s * 1e3, r->step_s / zero0_step(rows, nrows, r), m == e ? "" : "  MISMATCH");
        bad += m != e;
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: zero_bench LUA_SCRIPT [N,N,...] [repeat=R] [precision=P,P,...] "
                        "[key=value ...]\n");
        return 2;
    }
    int worlds[8] = {1, 2, 4, 8}, nw = 4, first_kv = 2;
    if (argc > 2 && strchr(argv[2], '=') == NULL) {
        nw = 0;
        for (char *t = strtok(argv[2], ","); t && nw < 8; t = strtok(NULL, ",")) worlds[nw++] = atoi(t);
        first_kv = 3;
    }
    /* repeat= and precision= are the driver's; the rest go to the script. */
    int repeat = 1, nprec = 0;
    char *precs[3], *script_args[20];
    int nscript = 0;
    for (int i = first_kv; i < argc; i++) {
        if (!strncmp(argv[i], "repeat=", 7)) {
            repeat = atoi(argv[i] + 7);
        } else if (!strncmp(argv[i], "precision=", 10)) {
            for (char *t = strtok(argv[i] + 10, ","); t; t = strtok(NULL, ",")) {
                if (strcmp(t, "fp32") && strcmp(t, "bf16") && strcmp(t, "fp16"))
                    return fprintf(stderr, "precision: fp32, bf16 or fp16, not '%s'\n", t), 2;
                if (nprec == 3) return fprintf(stderr, "at most 3 precisions\n"), 2;
                precs[nprec++] = t;
            }
        } else if (nscript < 20) {
            script_args[nscript++] = argv[i];
        }
    }
    if (repeat < 1) repeat = 1;
    if (nprec == 0) precs[nprec++] = "fp32";
    char out[] = "/tmp/zero_bench_XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) return perror("mkstemp"), 1;
    close(fd);
    row rows[3 * 8 * 4];
    int nrows = 0;
    for (int pi = 0; pi < nprec; pi++) {
      for (int wi = 0; wi < nw; wi++) {
        for (int rep = 0; rep < repeat; rep++) {
          for (int z = 0; z <= 3; z++) {
            bench_args a = {.script = argv[1]};
            char zarg[32], oarg[64], parg[32];
            snprintf(zarg, sizeof zarg, "zero=%d", z);
            snprintf(oarg, sizeof oarg, "out=%s", out);
            snprintf(parg, sizeof parg, "precision=%s", precs[pi]);
            a.args[a.nargs++] = zarg;
            a.args[a.nargs++] = oarg;
            a.args[a.nargs++] = parg;
            for (int i = 0; i < nscript; i++) a.args[a.nargs++] = script_args[i];
            if (run_ranks(worlds[wi], worlds[wi], 120000, 600, run_rank, &a) != 0) {
                fprintf(stderr, "N=%d zero=%d %s failed\n", worlds[wi], z, precs[pi]);
                return 1;
            }
            FILE *f = fopen(out, "r");
            char line[1024];
            row r = {0};
            int got = 0;
            while (f && fgets(line, sizeof line, f)) got = parse(line, &r); /* the last line */
            if (f) fclose(f);
            if (!got)
                return fprintf(stderr, "N=%d zero=%d %s: no result\n", worlds[wi], z, precs[pi]), 1;
            int at = nrows - 4 + z; /* this configuration's row from an earlier round */
            if (rep == 0) rows[nrows++] = r;
            else if (r.step_s < rows[at].step_s) rows[at].step_s = r.step_s;
            fprintf(stderr, "N=%d zero=%d %s round %d: %.1f ms, %d steps skipped\n", worlds[wi], z,
                    precs[pi], rep + 1, r.step_s * 1e3, r.skipped);
          }
        }
      }
    }
    unlink(out);
    int bad = 0;
    for (int pi = 0; pi < nprec; pi++) bad += print_table(rows, nrows, precs[pi]);
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        printf("{\"bench\":\"zero\",\"precision\":\"%s\",\"world\":%d,\"zero\":%d,\"params\":%lld,"
               "\"formula_bytes\":%.0f,\"measured_bytes\":%lld,\"expected_padded_bytes\":%lld,"
               "\"params_bytes\":%lld,\"grads_bytes\":%lld,\"optimizer_bytes\":%lld,"
               "\"params_peak_bytes\":%lld,\"grads_peak_bytes\":%lld,\"comm_peak_bytes\":%lld,"
               "\"step_ms\":%.3f,\"step_time_vs_zero0\":%.3f,\"loss\":%.6f,\"skipped_steps\":%d}\n",
               r->prec, r->world, r->zero, r->psi, formula(r), r->pb + r->gb + r->ob, expected(r),
               r->pb, r->gb, r->ob, r->ppeak, r->gpeak, r->cpeak, r->step_s * 1e3,
               r->step_s / zero0_step(rows, nrows, r), r->loss, r->skipped);
    }
    return bad ? 1 : 0;
}
