/* A light rank for simulated clusters (docs/scale.md): what a real rank does with the
 * launcher's store, and nothing else. It joins the store as a worker does (DS_RDZV and
 * DS_STORE_TOKEN from its agent, through the agent when DS_STORE_SOCKET is set), passes SIM_BARRIERS barriers of the whole world (1 by
 * default), prints "past SECONDS" (CLOCK_BOOTTIME, /proc/uptime's clock) once past the
 * first, and exits 0. With SIM_HOLD=1 it waits after the first barrier for a key nobody
 * sets, so a test can kill a node while every rank is in the job; the rank SIM_ABSENT
 * names waits so instead of coming to the first barrier (the others time out after
 * DS_RDZV_TIMEOUT_MS and say who is missing). With SIM_RENDEZVOUS=1 each rank first
 * meets the others as a communicator does: sets its own key, waits for everyone's (one
 * WAIT of world keys, at most 1024). With SIM_IDLE_S each rank stays that many seconds
 * past its barriers before it exits (a job in its steady state: bench/scale), and with
 * SIM_CHATTER_MS rank 0 prints a line that often meanwhile (one node with something to
 * say per pass of the controller's loop, the others idle). No Lua, no engine, no
 * communicator: thousands of these fit on one machine.
 *   The agent starts it in place of `dsrun worker` when DS_TEST_WORKER_EXE names it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_client.h"

static int env_int(const char *key, int fallback) {
    const char *v = getenv(key);
    return v && v[0] ? atoi(v) : fallback;
}

/* Sets sim/here/<rank>, then waits for every rank's: what comm.c's rendezvous asks of
 * the store. */
static int rendezvous(ds_store_client *c, int rank, int world, int timeout_ms, ds_err *err) {
    char(*keys)[32] = calloc((size_t)world, sizeof *keys);
    const char **ptrs = calloc((size_t)world, sizeof *ptrs);
    int rc = keys && ptrs ? 0 : ds_err_set(err, "out of memory");
    for (int r = 0; rc == 0 && r < world; r++) {
        snprintf(keys[r], sizeof keys[r], "sim/here/%d", r);
        ptrs[r] = keys[r];
    }
    if (rc == 0) rc = ds_store_set(c, keys[rank], "1", 1, err);
    if (rc == 0) rc = ds_store_wait(c, ptrs, world, timeout_ms, err);
    free(keys);
    free(ptrs);
    return rc;
}

/* SIM_IDLE_S: stays idle_s seconds; rank 0 prints a line every chatter_ms (0: silent). */
static void stay(int idle_s, int chatter_ms) {
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += idle_s;
    long long lines = 0;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long left_ms = (end.tv_sec - now.tv_sec) * 1000LL + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (left_ms <= 0) break;
        long long ms = chatter_ms > 0 && chatter_ms < left_ms ? chatter_ms : left_ms;
        if (chatter_ms > 0) printf("line %lld\n", ++lines);
        nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000}, NULL);
    }
}

static double uptime_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_BOOTTIME, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rank = env_int("RANK", -1), world = env_int("WORLD_SIZE", -1);
    int timeout_ms = env_int("DS_RDZV_TIMEOUT_MS", 60000), barriers = env_int("SIM_BARRIERS", 1);
    const char *rdzv = getenv("DS_RDZV"), *token = getenv("DS_STORE_TOKEN");
    if (rank < 0 || world < 1 || !rdzv || !token) {
        fprintf(stderr, "sim_rank: RANK, WORLD_SIZE, DS_RDZV and DS_STORE_TOKEN must be set\n");
        return 2;
    }
    ds_err err = {{0}};
    char prefix[32], name[64];
    snprintf(prefix, sizeof prefix, "a%d/", env_int("DS_ATTEMPT", 0));
    ds_store_client *c = NULL;
    if (!(c = ds_store_connect_rank(rdzv, token, timeout_ms, &err)) ||
        ds_store_set_prefix(c, prefix, &err) != 0) {
        fprintf(stderr, "sim_rank %d: %s\n", rank, err.msg);
        return 1;
    }
    int hold = env_int("SIM_HOLD", 0), absent = env_int("SIM_ABSENT", -1) == rank;
    if (env_int("SIM_RENDEZVOUS", 0) && rendezvous(c, rank, world, timeout_ms, &err) != 0) {
        fprintf(stderr, "sim_rank %d: %s\n", rank, err.msg);
        ds_store_close(c);
        return 1;
    }
    for (int b = 0; b < barriers; b++) {
        snprintf(name, sizeof name, "sim/%d", b);
        if (absent) break;
        if (ds_store_barrier(c, name, rank, world, timeout_ms, &err) != 0) {
            fprintf(stderr, "sim_rank %d: %s\n", rank, err.msg);
            ds_store_close(c);
            return 1;
        }
        if (b == 0) printf("past %.3f\n", uptime_s());
        if (hold) break;
    }
    if (hold || absent) {
        void *v;
        size_t n;
        ds_store_get(c, "sim/never", &v, &n, -1, &err); /* until the job stops us */
        fprintf(stderr, "sim_rank %d: %s\n", rank, err.msg);
        ds_store_close(c);
        return 1;
    }
    if (env_int("SIM_IDLE_S", 0) > 0) stay(env_int("SIM_IDLE_S", 0), rank == 0 ? env_int("SIM_CHATTER_MS", 0) : 0);
    ds_store_close(c);
    return 0;
}
