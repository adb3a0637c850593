/* Collective bandwidth over loopback: all-reduce, reduce-scatter and all-gather of
 * fp32 buffers from 1 KiB to 64 MiB, with 2 and 4 processes (real forked ranks, Gloo
 * over TCP, rendezvous through our store). `bytes` is the whole buffer: the all-reduce
 * buffer, the reduce-scatter input, the all-gather output. algbw = bytes / time; busbw
 * scales it as nccl-tests do (all-reduce 2(n-1)/n, the others (n-1)/n), so it compares
 * with the link's speed; both come from the median time of the repetitions. Prints a
 * table and one JSON object per configuration.
 *
 *   bench_comm [--worlds 2,4] [--max-bytes 67108864] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_test_util.h"

typedef enum { OP_ALLREDUCE, OP_REDUCE_SCATTER, OP_ALLGATHER, NOPS } op_kind;
static const char *const op_names[NOPS] = {"allreduce", "reduce_scatter", "allgather"};

static size_t max_bytes = (size_t)64 << 20;

/* Fewer repetitions for big buffers: each configuration takes well under a second. */
static int iters_for(size_t bytes) {
    size_t it = ((size_t)64 << 20) / bytes;
    return it < 3 ? 3 : it > 50 ? 50 : (int)it;
}

static int run_op(ds_comm *c, op_kind op, float *full, size_t n, int world, ds_err *err) {
    size_t shard = n / (size_t)world;
    int rank = ds_comm_rank(c);
    switch (op) {
    case OP_ALLREDUCE: return ds_comm_allreduce(c, full, n, DS_F32, DS_COMM_SUM, err);
    case OP_REDUCE_SCATTER:
        return ds_comm_reduce_scatter(c, full, full + (size_t)rank * shard, shard, DS_F32,
                                      DS_COMM_SUM, err);
    case OP_ALLGATHER:
        return ds_comm_allgather(c, full + (size_t)rank * shard, full, shard, DS_F32, err);
    default: return -1;
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double busbw_factor(op_kind op, int world) {
    double n = world;
    return op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : (n - 1) / n;
}

static int bench_rank(rank_env *env) {
    ds_comm *c = rank_open(env);
    int world = env->ctx.world_size, rank = env->ctx.rank;
    ds_err err = {{0}};
    float *buf = malloc(max_bytes);
    RANK_CHECK(buf != NULL, "out of memory");
    for (size_t i = 0; i < max_bytes / 4; i++) buf[i] = (float)(i % 13);
    for (int op = 0; op < NOPS; op++) {
        for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
            size_t n = bytes / 4;
            n -= n % (size_t)world; /* equal shards */
            int iters = iters_for(bytes);
            double times[50];
            RANK_CHECK(run_op(c, op, buf, n, world, &err) == 0, "%s", err.msg); /* warm-up */
            for (int i = 0; i < iters; i++) {
                /* each repetition starts together; rank 0's op cannot end before every
                 * rank has contributed, so its time covers the collective */
                RANK_CHECK(ds_comm_barrier(c, &err) == 0, "%s", err.msg);
                double t0 = now_s();
                RANK_CHECK(run_op(c, op, buf, n, world, &err) == 0, "%s", err.msg);
                times[i] = now_s() - t0;
            }
            if (rank != 0) continue;
            qsort(times, (size_t)iters, sizeof *times, cmp_double);
            /* the median resists the noise of a shared machine; the minimum is the best
             * the transport did */
            double dt = times[iters / 2], best = times[0];
            double real_bytes = (double)n * 4, algbw = real_bytes / dt / 1e9;
            double busbw = algbw * busbw_factor(op, world);
            printf("%-15s %5d %12.0f %12.1f %12.1f %10.3f %10.3f\n", op_names[op], world,
                   real_bytes, dt * 1e6, best * 1e6, algbw, busbw);
            printf("{\"bench\":\"comm\",\"backend\":\"gloo\",\"op\":\"%s\",\"world\":%d,"
                   "\"bytes\":%.0f,\"iters\":%d,\"median_us\":%.1f,\"min_us\":%.1f,"
                   "\"algbw_GBps\":%.4f,\"busbw_GBps\":%.4f}\n",
                   op_names[op], world, real_bytes, iters, dt * 1e6, best * 1e6, algbw, busbw);
            fflush(stdout);
        }
    }
    free(buf);
    ds_comm_close(c);
    return 0;
}

int main(int argc, char **argv) {
    int worlds[8] = {2, 4}, nworlds = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--worlds") == 0 && i + 1 < argc) {
            nworlds = 0;
            for (char *s = strtok(argv[++i], ","); s && nworlds < 8; s = strtok(NULL, ","))
                worlds[nworlds++] = atoi(s);
        } else if (strcmp(argv[i], "--max-bytes") == 0 && i + 1 < argc) {
            max_bytes = strtoull(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--worlds 2,4] [--max-bytes N]\n", argv[0]);
            return 2;
        }
    }
    if (max_bytes < 1024) max_bytes = 1024;
    printf("%-15s %5s %12s %12s %12s %10s %10s\n", "op", "world", "bytes", "median_us",
           "min_us", "algbw_GBps", "busbw_GBps");
    fflush(stdout);
    for (int w = 0; w < nworlds; w++) {
        if (worlds[w] < 2 || worlds[w] > 64) {
            fprintf(stderr, "world %d: expected 2..64\n", worlds[w]);
            return 2;
        }
        if (run_ranks(worlds[w], worlds[w], 60000, 600, bench_rank, NULL) != 0) return 1;
    }
    return 0;
}
