/* ZeRO exactness: a tiny GPT (vocab 64, context 16, 2 layers, d 32, 28k parameters)
 * trained 20 steps with AdamW and gradient clipping active (max norm 0.5; the norm is
 * ~1 every step) by W real processes over Gloo on loopback, each running
 * zero_gpt.lua on its contiguous rows of the same global batch. Every step's loss and
 * global gradient norm and the final parameters must match the single-rank run with
 * ZeRO off within |a - b| <= 1e-5 + 1.3e-6 |b| (the fp32 tolerance); a run
 * at world 1 must match it bit for bit (same arithmetic, only split differently).
 * With dropout 0.1 (SGD) worlds 2 and 4 match the world-1 run within the same tolerance:
 * dropout masks follow the global batch row, not the rank's local one.
 *
 *   zero_exact SCRIPT OUTDIR [FILTER]   FILTER: run only cases whose name contains it
 *
 * Each rank opens the device DS_ENGINE_DEVICE names (as a worker does). With
 * ZERO_EXACT_AGAINST=DIR every case's output must also equal DIR's output of the same
 * case byte for byte: how CI proves the simulated GPU gives the cpu's bits (run on sim
 * against the cpu run's directory).
 *
 * Prints one line per case with the largest absolute and relative differences seen. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#include "../../unit/comm/comm_test_util.h"
#include "rank_device.h"
#include "script.h"

static const char *g_script, *g_outdir, *g_filter, *g_against;

typedef struct script_args {
    int nargs;
    char *args[16];
} script_args;

static int run_script_rank(rank_env *env) {
    script_args *a = env->arg;
    ds_err err = {{0}};
    if (ds_rank_open_device(&env->ctx, &err) != 0) {
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        return 1;
    }
    int rc = ds_script_run(&env->ctx, (char *)g_script, a->nargs, a->args);
    if (ds_rank_close_device(&err) != 0) {
        fprintf(stderr, "rank %d: %s\n", env->ctx.rank, err.msg);
        rc = 1;
    }
    if (env->ctx.comm) ds_comm_close(env->ctx.comm);
    return rc;
}

/* Runs the script at world w with the given key=value args plus out=OUTDIR/name.txt. */
static void run_case(const char *name, int w, const char *const *kv, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s.txt", g_outdir, name);
    script_args a = {0};
    char outarg[600];
    snprintf(outarg, sizeof outarg, "out=%s", out);
    char ckarg[2][600];
    int nck = 0;
    for (const char *const *p = kv; *p; p++) /* save=NAME / load=NAME: under OUTDIR */
        if ((!strncmp(*p, "save=", 5) || !strncmp(*p, "load=", 5)) && nck < 2) {
            snprintf(ckarg[nck], sizeof ckarg[nck], "%.5s%s/%s", *p, g_outdir, *p + 5);
            if (**p == 's') {
                char cmd[700];
                snprintf(cmd, sizeof cmd, "rm -rf '%s'", ckarg[nck] + 5);
                if (system(cmd) != 0) fail_msg("%s failed", cmd);
            }
            nck++;
        }
    a.args[a.nargs++] = outarg;
    for (int i = 0; i < nck; i++) a.args[a.nargs++] = ckarg[i];
    for (; *kv && a.nargs < 15; kv++)
        if (strncmp(*kv, "save=", 5) && strncmp(*kv, "load=", 5)) a.args[a.nargs++] = (char *)*kv;
    int failed = run_ranks(w, w, 60000, 120, run_script_rank, &a);
    if (failed) fail_msg("%s: %d of %d ranks failed", name, failed, w);
}

typedef struct result {
    int n;
    char kind[40000][16];
    int idx[40000];
    double v[40000];
} result;

static result *load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("cannot open %s", path);
    result *r = calloc(1, sizeof *r);
    char kind[16];
    int idx;
    double v;
    while (fscanf(f, "%15s %d %lf", kind, &idx, &v) == 3) {
        if (r->n >= 40000) fail_msg("%s: too many values", path);
        snprintf(r->kind[r->n], sizeof r->kind[0], "%s", kind);
        r->idx[r->n] = idx;
        r->v[r->n] = v;
        r->n++;
    }
    fclose(f);
    return r;
}

enum { CMP_REF, CMP_TOL, CMP_LOSS_ONLY, CMP_BITWISE, CMP_HALF };

/* 16-bit runs (bf16 keeps 8 significant bits, fp16 11): every partial sum of a 16-bit
 * reduction is rounded, so a data-parallel run's gradients differ from one rank's in the
 * last 16-bit place, and Adam turns that into master weights that differ by up to lr per
 * step where a gradient is near 0; the working copy, the masters rounded, may then land
 * some 16-bit places away on small parameters. So parameters are judged as a whole: the
 * L2 norm of the difference relative to the reference's. Measured on these runs (bf16,
 * the loosest, with 16-bit activations between 16-bit layers and 16-bit logits): losses
 * within 4.0e-5 relative, grad norms 1.6e-3, parameters 2.4e-3 (L2); bf16 against fp32:
 * 5.6e-5, 5.3e-3, 3.2e-3 (6.2e-5, 5.0e-3, 3.0e-3 with fp32 logits; 5.1e-5, 3.5e-3,
 * 2.4e-3 with fp32 activations). fp16 runs: 6.6e-6, 9.5e-4, 5.9e-4. The bounds leave
 * 2-5x. */
#define HALF_LOSS_REL 2e-4
#define HALF_GNORM_REL 1e-2
#define HALF_PARAM_L2 1e-2

/* Whether b is close enough to the reference a for the mode, per kind (0 loss, 1 grad
 * norm, 2 parameter, 3 loss scale and skip flag: always exact). */
static int within(int mode, int k, double a, double b) {
    /* An overflowed step's norm: inf or NaN, depending on where the infs met. */
    if (!isfinite(a) || !isfinite(b)) return !isfinite(a) && !isfinite(b);
    double d = fabs(a - b);
    if (k == 3 || mode == CMP_BITWISE) return d == 0;
    switch (mode) {
    case CMP_LOSS_ONLY: /* AdamW at world 4: see build_cases */
        return k == 2 ? d <= 1e-4 : d <= 1e-5 + 1.3e-6 * fabs(a);
    case CMP_HALF: /* parameters: as a whole, in compare() */
        return d <= (k == 0 ? HALF_LOSS_REL : HALF_GNORM_REL) * fabs(a);
    default:
        return d <= 1e-5 + 1.3e-6 * fabs(a);
    }
}

/* max_abs/max_rel per kind: loss, gnorm, param, loss scale/skip flag (the last always
 * exact, see within()). CMP_BITWISE: demand bit equality (as printed). */
static void compare(const char *name, const char *ref_path, const char *path, int mode) {
    int exact = mode == CMP_BITWISE;
    result *a = load(ref_path), *b = load(path);
    /* A resumed run starts later: compare from the reference's matching line on. */
    int skip = 0;
    while (skip < a->n && b->n > 0 && (strcmp(a->kind[skip], b->kind[0]) || a->idx[skip] != b->idx[0])) skip++;
    if (skip == a->n) skip = 0;
    if (skip) {
        memmove(a->kind, a->kind + skip, (size_t)(a->n - skip) * sizeof a->kind[0]);
        memmove(a->idx, a->idx + skip, (size_t)(a->n - skip) * sizeof a->idx[0]);
        memmove(a->v, a->v + skip, (size_t)(a->n - skip) * sizeof a->v[0]);
        a->n -= skip;
    }
    if (a->n != b->n) fail_msg("%s: %d values, the reference has %d", name, b->n, a->n);
    double max_abs[4] = {0}, max_rel[4] = {0}, dd = 0, rr = 0; /* parameters: sum d^2, ref^2 */
    int bad = 0;
    for (int i = 0; i < a->n; i++) {
        if (strcmp(a->kind[i], b->kind[i]) || a->idx[i] != b->idx[i])
            fail_msg("%s: line %d is %s %d, the reference's %s %d", name, i + 1, b->kind[i],
                     b->idx[i], a->kind[i], a->idx[i]);
        double d = fabs(a->v[i] - b->v[i]), rel = d / fmax(fabs(a->v[i]), 1e-30);
        if (!isfinite(d)) d = rel = 0; /* both non-finite, or within() says no */
        int k = a->kind[i][0] == 'l' ? 0 : a->kind[i][0] == 'g' ? 1 : a->kind[i][0] == 's' ? 3 : 2;
        if (d > max_abs[k]) max_abs[k] = d;
        if (rel > max_rel[k] && fabs(a->v[i]) > 1e-3) max_rel[k] = rel;
        if (k == 2) {
            dd += d * d;
            rr += a->v[i] * a->v[i];
        }
        /* 16-bit parameters: judged as a whole below */
        int ok = mode == CMP_HALF && k == 2 ? 1 : within(mode, k, a->v[i], b->v[i]);
        if (!ok && bad++ < 5)
            fprintf(stderr, "%s: %s %d = %.9e, reference %.9e (diff %.3e)\n", name, a->kind[i],
                    a->idx[i], b->v[i], a->v[i], d);
    }
    double l2 = rr > 0 ? sqrt(dd / rr) : sqrt(dd);
    if (mode == CMP_HALF && !(l2 <= HALF_PARAM_L2) && bad++ < 5)
        fprintf(stderr, "%s: parameters differ by %.3e relative (L2), bound %.1e\n", name, l2, HALF_PARAM_L2);
    printf("%-28s loss max abs %.2e rel %.2e | gnorm abs %.2e rel %.2e | params abs %.2e "
           "rel(|p|>1e-3) %.2e L2 %.2e%s\n", name, max_abs[0], max_rel[0], max_abs[1], max_rel[1],
           max_abs[2], max_rel[2], l2, exact ? " (bitwise)" : mode == CMP_LOSS_ONLY ? " (params <= 1e-4)"
           : mode == CMP_HALF ? " (16-bit)" : "");
    fflush(stdout);
    free(a);
    free(b);
    if (bad) fail_msg("%s: %d values outside the tolerance", name, bad);
}

/* One run: world, key=value args, which reference it is compared with, and how. */
typedef struct exact_case {
    char name[64];
    int world;
    const char *kv[12];
    int ref;          /* index of the case it is compared with */
    int mode;         /* CMP_* */
    int same_as;      /* >= 0: must also be bit-identical to that case */
    char out[600];
} exact_case;


static exact_case g_cases[160];
static int g_ncases;

/* Not inlined: gcc -O2 -Warray-bounds would then check the copy loop against each caller's
 * shorter NULL-terminated list and warn about elements past its NULL. */
__attribute__((noinline)) static int add_case(const char *name, int world, const char *const *kv, int ref, int mode, int same_as) {
    exact_case *c = &g_cases[g_ncases];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->world = world;
    for (int i = 0; i < 11 && kv[i]; i++) c->kv[i] = kv[i];
    c->ref = ref;
    c->mode = mode;
    c->same_as = same_as;
    return g_ncases++;
}

/* The same case's output in the ZERO_EXACT_AGAINST directory, byte for byte. */
static void compare_against(const exact_case *c) {
    char other[700];
    snprintf(other, sizeof other, "%s/%s.txt", g_against, c->name);
    FILE *a = fopen(other, "rb"), *b = fopen(c->out, "rb");
    if (!a || !b) fail_msg("%s: cannot open %s or %s", c->name, other, c->out);
    long line = 1;
    int ca, cb;
    do {
        ca = fgetc(a), cb = fgetc(b);
        if (ca != cb) fail_msg("%s: differs from %s at line %ld", c->name, other, line);
        line += ca == '\n';
    } while (ca != EOF);
    fclose(a);
    fclose(b);
}

static void run_exact_case(void **state) {
    exact_case *c = *state;
    run_case(c->name, c->world, c->kv, c->out, sizeof c->out);
    if (g_against) compare_against(c);
    if (c->mode == CMP_REF) return;
    const exact_case *r = &g_cases[c->ref];
    compare(c->name, r->out, c->out, c->mode);
    if (c->same_as >= 0) compare(c->name, g_cases[c->same_as].out, c->out, CMP_BITWISE);
}

/* The matrix, per optimizer: the reference (world 1, ZeRO off) with accumulation 1 and 2;
 * ZeRO 1..3 at world 1 (bit for bit); ZeRO 0..3 at worlds 2 and 4 with accumulation 1
 * and 2; small buckets; per-stage mixes. SGD: everything within the tolerance. AdamW:
 * losses and grad norms within the tolerance everywhere, parameters too at world <= 2;
 * at world 4 (see docs/zero.md: Adam turns the reordering noise of gradients whose true
 * value is 0, such as the attention key bias, into updates of up to lr * noise / eps)
 * ZeRO 2 and 3 must equal ZeRO 1 bit for bit and the parameters stay within 1e-4.
 * Returns the index of the AdamW reference with accumulation 1. */
static int build_cases(void) {
    static const char *opts[2][3] = {{"optim=sgd", "lr=0.1", NULL}, {"optim=adamw", "lr=0.001", NULL}};
    static const char *zs[4] = {"zero=0", "zero=1", "zero=2", "zero=3"};
    int adamw_ref = -1;
    for (int o = 0; o < 2; o++) {
        const char *on = o ? "adamw" : "sgd";
        char name[64];
        int ref[2];
        for (int a = 0; a < 2; a++) {
            const char *kv[] = {opts[o][0], opts[o][1], "zero=0", a ? "accum=2" : "accum=1", NULL};
            snprintf(name, sizeof name, "%s_ref_accum%d", on, a + 1);
            ref[a] = add_case(name, 1, kv, 0, CMP_REF, -1);
        }
        if (o == 1) adamw_ref = ref[0];
        for (int z = 1; z <= 3; z++) {
            const char *kv[] = {opts[o][0], opts[o][1], zs[z], NULL};
            snprintf(name, sizeof name, "%s_w1_z%d", on, z);
            add_case(name, 1, kv, ref[0], CMP_BITWISE, -1);
        }
        for (int w = 2; w <= 4; w += 2)
            for (int a = 0; a < 2; a++) {
                int z1 = -1;
                for (int z = 0; z <= 3; z++) {
                    const char *kv[] = {opts[o][0], opts[o][1], zs[z], a ? "accum=2" : "accum=1", NULL};
                    snprintf(name, sizeof name, "%s_w%d_z%d_accum%d", on, w, z, a + 1);
                    int loose = o == 1 && w == 4;
                    int same = loose && z >= 2 && a == 0 ? z1 : -1;
                    int k = add_case(name, w, kv, ref[a], loose ? CMP_LOSS_ONLY : CMP_TOL, same);
                    if (z == 1) z1 = k;
                }
            }
        const int loose4 = o == 1 ? CMP_LOSS_ONLY : CMP_TOL;
        const char *b1[] = {opts[o][0], opts[o][1], "zero=2", "bucket=4000", NULL};
        snprintf(name, sizeof name, "%s_w4_z2_bucket4000", on);
        add_case(name, 4, b1, ref[0], loose4, -1);
        const char *b2[] = {opts[o][0], opts[o][1], "zero=3", "bucket=2000", "accum=2", NULL};
        snprintf(name, sizeof name, "%s_w2_z3_bucket2000_accum2", on);
        add_case(name, 2, b2, ref[1], CMP_TOL, -1);
        const char *m1[] = {opts[o][0], opts[o][1], "embed=1", "blocks=3", "head=2", NULL};
        snprintf(name, sizeof name, "%s_w2_mix_e1_b3_h2", on);
        add_case(name, 2, m1, ref[0], CMP_TOL, -1);
        const char *m2[] = {opts[o][0], opts[o][1], "embed=1", "blocks=3", "head=0", "accum=2", NULL};
        snprintf(name, sizeof name, "%s_w4_mix_e1_b3_h0_accum2", on);
        add_case(name, 4, m2, ref[1], loose4, -1);
        const char *m3[] = {opts[o][0], opts[o][1], "embed=3", "blocks=0", "head=1", NULL};
        snprintf(name, sizeof name, "%s_w4_mix_e3_b0_h1", on);
        add_case(name, 4, m3, ref[0], loose4, -1);

        /* State checkpoints: saved after step 10 at world 4 (ZeRO-3) and continued at
         * world 2 (ZeRO-1) and world 1 (ZeRO off): reshards, matches the uninterrupted
         * world-4 run; saved and continued at world 2 (ZeRO-3): bit for bit. */
        static char ck[2][4][32]; /* the cases keep pointers to these */
        char *save4 = ck[o][0], *load4 = ck[o][1], *save2 = ck[o][2], *load2 = ck[o][3];
        snprintf(save4, 32, "save=ck_%s_w4", on);
        snprintf(load4, 32, "load=ck_%s_w4", on);
        snprintf(save2, 32, "save=ck_%s_w2", on);
        snprintf(load2, 32, "load=ck_%s_w2", on);
        const char *c1[] = {opts[o][0], opts[o][1], "zero=3", save4, "save_at=10", NULL};
        snprintf(name, sizeof name, "%s_ckpt_save_w4_z3", on);
        int full4 = add_case(name, 4, c1, ref[0], loose4, -1);
        const char *c2[] = {opts[o][0], opts[o][1], "zero=1", load4, NULL};
        snprintf(name, sizeof name, "%s_ckpt_load_w2_z1", on);
        add_case(name, 2, c2, full4, CMP_TOL, -1);
        const char *c3[] = {opts[o][0], opts[o][1], "zero=0", load4, NULL};
        snprintf(name, sizeof name, "%s_ckpt_load_w1_z0", on);
        add_case(name, 1, c3, full4, CMP_TOL, -1);
        const char *c4[] = {opts[o][0], opts[o][1], "zero=3", save2, "save_at=10", NULL};
        snprintf(name, sizeof name, "%s_ckpt_save_w2_z3", on);
        int full2 = add_case(name, 2, c4, ref[0], CMP_TOL, -1);
        const char *c5[] = {opts[o][0], opts[o][1], "zero=3", load2, NULL};
        snprintf(name, sizeof name, "%s_ckpt_load_w2_z3", on);
        add_case(name, 2, c5, full2, CMP_BITWISE, -1);
    }
    /* Dropout 0.1 (residual, embedding and attention probabilities): masks keyed by
     * global batch row, so worlds 2 and 4 draw the world-1 masks; SGD, the tolerance. */
    const char *d1[] = {"optim=sgd", "lr=0.1", "dropout=0.1", "zero=0", NULL};
    int dref = add_case("sgd_dropout_ref", 1, d1, 0, CMP_REF, -1);
    add_case("sgd_dropout_w2_z0", 2, d1, dref, CMP_TOL, -1);
    const char *d4[] = {"optim=sgd", "lr=0.1", "dropout=0.1", "zero=2", NULL};
    add_case("sgd_dropout_w4_z2", 4, d4, dref, CMP_TOL, -1);
    return adamw_ref;
}

/* Mixed precision (AdamW, all stages in one precision unless named):
 *  - bf16 at world 1 tracks the fp32 run; ZeRO 1..3 at world 1 are bit for bit ZeRO 0;
 *    worlds 2 and 4, each ZeRO stage, match the world-1 run of the same precision within
 *    the 16-bit tolerances; the same for fp16 at the default loss scale (no overflow in
 *    these 20 steps);
 *  - per-stage precision and ZeRO mixes at world 2 against the same model at world 1;
 *  - fp16 with a first loss scale of 2^24: the first steps overflow and are skipped while
 *    the scaler backs off (hysteresis 2). ZeRO 1..3 at world 1 skip the same steps, with
 *    the same scales, bit for bit. At worlds 2 and 4 the script itself checks that every
 *    rank skipped the same steps; which steps overflow may differ from world 1 (a rank's
 *    gradient over its own rows can overflow where the whole batch's does not), so those
 *    runs are not compared with it;
 *  - checkpoints keep fp32 masters (bf16 saved at world 4 / ZeRO 3, continued at world 2
 *    / ZeRO 1 and world 1 / ZeRO 0) and the loss scaler's state (fp16, saved mid
 *    back-off, continued bit for bit). */
static void build_half_cases(int fp32_ref) {
    static const char *zs[4] = {"zero=0", "zero=1", "zero=2", "zero=3"};
    static const char *prec[2] = {"precision=bf16", "precision=fp16"};
    static const char *pn[2] = {"bf16", "fp16"};
    char name[64];
    int ref[2];
    for (int p = 0; p < 2; p++) {
        const char *ref_kv[] = {"optim=adamw", "lr=0.001", "zero=0", prec[p], NULL};
        snprintf(name, sizeof name, "%s_ref", pn[p]);
        ref[p] = add_case(name, 1, ref_kv, fp32_ref, p == 0 ? CMP_HALF : CMP_REF, -1);
        for (int z = 1; z <= 3; z++) {
            const char *kv[] = {"optim=adamw", "lr=0.001", zs[z], prec[p], NULL};
            snprintf(name, sizeof name, "%s_w1_z%d", pn[p], z);
            add_case(name, 1, kv, ref[p], CMP_BITWISE, -1);
        }
        for (int w = 2; w <= 4; w += 2)
            for (int z = 0; z <= 3; z++) {
                const char *kv[] = {"optim=adamw", "lr=0.001", zs[z], prec[p], NULL};
                snprintf(name, sizeof name, "%s_w%d_z%d", pn[p], w, z);
                add_case(name, w, kv, ref[p], CMP_HALF, -1);
            }
    }
    static const char *mix[] = {"optim=adamw", "lr=0.001", "embed=1", "blocks=3", "head=2",
                                "embed_precision=bf16", "blocks_precision=fp32",
                                "head_precision=fp16", NULL};
    int mref = add_case("mixprec_w1", 1, mix, 0, CMP_REF, -1);
    add_case("mixprec_w2_e1bf16_b3fp32_h2fp16", 2, mix, mref, CMP_HALF, -1);

    static const char *ovf[] = {"optim=adamw", "lr=0.001", "zero=0", "precision=fp16",
                                "init_scale=16777216", NULL};
    int oref = add_case("fp16_overflow_ref", 1, ovf, 0, CMP_REF, -1);
    for (int z = 1; z <= 3; z++) {
        const char *kv[] = {"optim=adamw", "lr=0.001", zs[z], "precision=fp16", "init_scale=16777216", NULL};
        snprintf(name, sizeof name, "fp16_overflow_w1_z%d", z);
        add_case(name, 1, kv, oref, CMP_BITWISE, -1);
    }
    static const char *o2[] = {"optim=adamw", "lr=0.001", "zero=1", "precision=fp16", "init_scale=16777216", NULL};
    add_case("fp16_overflow_w2_z1_ranks_agree", 2, o2, 0, CMP_REF, -1);
    static const char *o4[] = {"optim=adamw", "lr=0.001", "zero=3", "precision=fp16", "init_scale=16777216", NULL};
    add_case("fp16_overflow_w4_z3_ranks_agree", 4, o4, 0, CMP_REF, -1);

    static const char *c1[] = {"optim=adamw", "lr=0.001", "zero=3", "precision=bf16", "save=ck_bf16_w4", "save_at=10", NULL};
    int full4 = add_case("bf16_ckpt_save_w4_z3", 4, c1, ref[0], CMP_HALF, -1);
    static const char *c2[] = {"optim=adamw", "lr=0.001", "zero=1", "precision=bf16", "load=ck_bf16_w4", NULL};
    add_case("bf16_ckpt_load_w2_z1", 2, c2, full4, CMP_HALF, -1);
    static const char *c3[] = {"optim=adamw", "lr=0.001", "zero=0", "precision=bf16", "load=ck_bf16_w4", NULL};
    add_case("bf16_ckpt_load_w1_z0", 1, c3, full4, CMP_HALF, -1);
    static const char *c4[] = {"optim=adamw", "lr=0.001", "zero=0", "precision=fp16", "init_scale=16777216",
                               "save=ck_fp16_ovf", "save_at=4", NULL};
    int full1 = add_case("fp16_overflow_ckpt_save_w1", 1, c4, oref, CMP_BITWISE, -1);
    static const char *c5[] = {"optim=adamw", "lr=0.001", "zero=2", "precision=fp16", "init_scale=16777216",
                               "load=ck_fp16_ovf", NULL};
    add_case("fp16_overflow_ckpt_load_w1_z2", 1, c5, full1, CMP_BITWISE, -1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: zero_exact SCRIPT OUTDIR [FILTER]\n");
        return 2;
    }
    g_script = argv[1];
    g_outdir = argv[2];
    g_filter = argc > 3 && argv[3][0] ? argv[3] : NULL;
    g_against = getenv("ZERO_EXACT_AGAINST");
    if (mkdir(g_outdir, 0755) != 0 && errno != EEXIST) {
        perror(g_outdir);
        return 2;
    }
    build_half_cases(build_cases());
    static struct CMUnitTest tests[160];
    int n = 0;
    for (int i = 0; i < g_ncases; i++) {
        exact_case *c = &g_cases[i];
        int is_ref = c->mode == CMP_REF;
        if (g_filter && !is_ref && !strstr(c->name, g_filter)) continue;
        if (g_filter && !is_ref && c->same_as >= 0 && !strstr(g_cases[c->same_as].name, g_filter))
            c->same_as = -1;
        tests[n++] = (struct CMUnitTest){c->name, run_exact_case, NULL, NULL, c};
    }
    return _cmocka_run_group_tests("zero_exact", tests, (size_t)n, NULL, NULL);
}
