/* bench_ckpt [MODEL_MB] [DIR]: saves an Adam training state (params, adam_m, adam_v:
 * 3 fp32 arrays of MODEL_MB each) from W forked ranks, then loads it back at W' ranks
 * (resharding), for a few (W, W') pairs. Prints a table, then one JSON object per line
 * per configuration. Times include fsync (save) and checksum verification (load); the
 * load reads from the page cache, as a restart on the same node does. */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

static const char *ARRAYS[] = {"stage0/params", "stage0/adam_m", "stage0/adam_v"};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void zero_range(uint64_t n, int world, int rank, uint64_t *b, uint64_t *e) {
    uint64_t s = (n + (uint64_t)world - 1) / (uint64_t)world;
    *b = s * (uint64_t)rank < n ? s * (uint64_t)rank : n;
    *e = *b + s < n ? *b + s : n;
}

typedef struct pipes {
    int up[2], down[2];
} pipes;

static int barrier(void *arg, ds_err *err) {
    pipes *p = arg;
    char c = 'a';
    if (write(p->up[1], &c, 1) != 1 || read(p->down[0], &c, 1) != 1 || c != 'g')
        return ds_err_set(err, "barrier failed");
    return 0;
}

static int save_rank(const char *dir, uint64_t n, int rank, int world, pipes *p) {
    uint64_t b, e;
    zero_range(n, world, rank, &b, &e);
    float *x = malloc((e - b) * sizeof *x + 4);
    for (uint64_t i = b; i < e; i++) x[i - b] = (float)i * 0.25f;
    ds_err err = {""};
    ds_ckpt_writer *w = ds_ckpt_writer_begin(dir, 1, rank, world, &err);
    if (!w) return 1;
    for (int a = 0; a < 3; a++) ds_ckpt_writer_add(w, ARRAYS[a], DS_F32, n, b, e, x, &err);
    int rc = ds_ckpt_writer_commit(w, "{\"bench\":true}", barrier, p, &err);
    if (rc) fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    free(x);
    return rc ? 1 : 0;
}

static int load_rank(const char *dir, uint64_t n, int rank, int world) {
    uint64_t b, e;
    zero_range(n, world, rank, &b, &e);
    float *x = malloc((e - b) * sizeof *x + 4);
    ds_err err = {""};
    ds_ckpt *ck = ds_ckpt_open(dir, &err);
    int rc = ck ? 0 : 1;
    for (int a = 0; a < 3 && rc == 0; a++)
        rc = ds_ckpt_read_range(ck, ARRAYS[a], b, e, x, &err) ? 1 : 0;
    for (uint64_t i = b; i < e && rc == 0; i++)
        if (x[i - b] != (float)i * 0.25f) rc = 1;
    if (rc) fprintf(stderr, "load rank %d: %s\n", rank, err.msg[0] ? err.msg : "wrong data");
    ds_ckpt_close(ck);
    free(x);
    return rc;
}

/* Runs `world` children (save or load) and coordinates the save's two barriers. */
static double run_world(const char *dir, uint64_t n, int world, int save) {
    pipes p[64];
    pid_t pid[64];
    double t0 = now();
    for (int r = 0; r < world; r++) {
        if (pipe(p[r].up) || pipe(p[r].down)) exit(1);
        pid[r] = fork();
        if (pid[r] == 0) _exit(save ? save_rank(dir, n, r, world, &p[r]) : load_rank(dir, n, r, world));
    }
    for (int round = 0; save && round < 2; round++) {
        char c;
        for (int r = 0; r < world; r++)
            if (read(p[r].up[0], &c, 1) != 1) exit(1);
        for (int r = 0; r < world; r++) (void)!write(p[r].down[1], "g", 1);
    }
    int ok = 1;
    for (int r = 0; r < world; r++) {
        int st;
        waitpid(pid[r], &st, 0);
        ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
        close(p[r].up[0]), close(p[r].up[1]), close(p[r].down[0]), close(p[r].down[1]);
    }
    if (!ok) {
        fprintf(stderr, "bench_ckpt: a rank failed\n");
        exit(1);
    }
    return now() - t0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

int main(int argc, char **argv) {
    double mb = argc > 1 ? atof(argv[1]) : 64;
    const char *base = argc > 2 ? argv[2] : "/tmp";
    uint64_t n = (uint64_t)(mb * 1e6 / 4);
    int pairs[][2] = {{1, 1}, {2, 1}, {4, 2}, {4, 1}, {2, 4}};
    char lines[8][256];
    int nl = 0;
    printf("%-6s %-6s %12s %10s %10s %10s %10s\n", "save W", "load W", "state MB", "save s",
           "save MB/s", "load s", "load MB/s");
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/bench-ckpt-%d", base, (int)getpid());
        double total = 3.0 * (double)n * 4 / 1e6;
        double ts = run_world(dir, n, pairs[i][0], 1);
        double tl = run_world(dir, n, pairs[i][1], 0);
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        printf("%-6d %-6d %12.1f %10.3f %10.0f %10.3f %10.0f\n", pairs[i][0], pairs[i][1], total,
               ts, total / ts, tl, total / tl);
        snprintf(lines[nl++], sizeof lines[0],
                 "{\"bench\":\"ckpt\",\"save_world\":%d,\"load_world\":%d,\"state_mb\":%.1f,"
                 "\"save_s\":%.4f,\"save_mb_per_s\":%.1f,\"load_s\":%.4f,\"load_mb_per_s\":%.1f}",
                 pairs[i][0], pairs[i][1], total, ts, total / ts, tl, total / tl);
    }
    for (int i = 0; i < nl; i++) puts(lines[i]);
    return 0;
}
