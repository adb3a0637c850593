/* Multi-process harness of the comm tests: a real store server in the test process and
 * one forked process per rank, each connecting to the store as a worker does and
 * running a rank function. A rank reports failure by its exit status (with a message
 * on stderr): CMocka's asserts belong to the parent process only. */
#ifndef DS_COMM_TEST_UTIL_H
#define DS_COMM_TEST_UTIL_H

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "store_client.h"
#include "store_server.h"
#include "store_token.h"

/* In a rank: on failure print where and why, and exit 1. */
#define RANK_CHECK(cond, ...)                                                              \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "rank check failed %s:%d: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

typedef struct rank_env {
    ds_context ctx; /* rank, world, attempt, host 127.0.0.1, store */
    int timeout_ms; /* what the job asks of ds_comm_open_opts */
    void *arg;
} rank_env;

/* Runs in the rank's process; returns 0 on success (or exits non-zero). */
typedef int (*rank_fn)(rank_env *env);

static inline ds_comm *rank_open(rank_env *env) {
    ds_err err = {{0}};
    ds_comm_opts o = {.timeout_ms = env->timeout_ms};
    ds_comm *c = ds_comm_open_opts(&env->ctx, &o, &err);
    RANK_CHECK(c != NULL, "open: %s", err.msg);
    return c;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts ranks 0..nstart-1 of a world of `world` (nstart < world leaves ranks out),
 * waits for all of them (each is bounded by alarm(limit_s)), returns how many failed.
 * The ranks are forked before the store server starts (they learn its port through a
 * pipe), so they inherit none of its threads' memory: LeakSanitizer checks them clean. */
static inline int run_ranks(int world, int nstart, int timeout_ms, int limit_s, rank_fn fn,
                            void *arg) {
    char token[DS_STORE_TOKEN_LEN + 1];
    ds_err err = {{0}};
    int pfd[2];
    if (ds_store_make_token(token, &err) != 0 || pipe(pfd) != 0) return world;
    pid_t pids[64];
    fflush(NULL);
    for (int r = 0; r < nstart; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            alarm((unsigned)limit_s); /* a hung rank dies and fails the test */
            /* CMocka's crash handlers belong to the parent: a crashing rank must die of
             * its signal, visibly, not resume the test runner in the child */
            signal(SIGSEGV, SIG_DFL);
            signal(SIGBUS, SIG_DFL);
            signal(SIGILL, SIG_DFL);
            signal(SIGFPE, SIG_DFL);
            close(pfd[1]);
            int port = 0;
            RANK_CHECK(read(pfd[0], &port, sizeof port) == (ssize_t)sizeof port && port > 0,
                       "no store port");
            close(pfd[0]);
            rank_env env = {.timeout_ms = timeout_ms, .arg = arg};
            ds_context_single(&env.ctx);
            env.ctx.rank = r;
            env.ctx.world_size = world;
            env.ctx.local_rank = r;
            env.ctx.local_world_size = world;
            snprintf(env.ctx.host, sizeof env.ctx.host, "127.0.0.1");
            env.ctx.store = ds_store_connect("127.0.0.1", port, token, 5000, &err);
            RANK_CHECK(env.ctx.store != NULL, "store: %s", err.msg);
            RANK_CHECK(ds_store_set_prefix(env.ctx.store, "a0/", &err) == 0, "%s", err.msg);
            if (world > 1) { /* as the worker does: the communicator's watch thread's client */
                env.ctx.watch_store = ds_store_connect("127.0.0.1", port, token, 5000, &err);
                RANK_CHECK(env.ctx.watch_store != NULL, "store: %s", err.msg);
                RANK_CHECK(ds_store_set_prefix(env.ctx.watch_store, "a0/", &err) == 0, "%s", err.msg);
            }
            int rc = fn(&env);
            ds_store_close(env.ctx.store);
            if (env.ctx.watch_store) ds_store_close(env.ctx.watch_store);
            exit(rc == 0 ? 0 : 1);
        }
    }
    close(pfd[0]);
    ds_store_server *srv = NULL;
    int port = -1;
    if (ds_store_server_start("127.0.0.1", 0, token, &srv, &err) == 0)
        port = ds_store_server_port(srv);
    else
        fprintf(stderr, "store server: %s\n", err.msg);
    for (int r = 0; r < nstart; r++)
        if (write(pfd[1], &port, sizeof port) != (ssize_t)sizeof port) break;
    close(pfd[1]);
    int failed = 0;
    for (int r = 0; r < nstart; r++) {
        int st = 0;
        if (pids[r] < 0 || waitpid(pids[r], &st, 0) != pids[r]) {
            failed++;
            continue;
        }
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "rank %d died of signal %d\n", r, WTERMSIG(st));
            failed++;
        } else if (WEXITSTATUS(st) != 0) {
            fprintf(stderr, "rank %d exited %d\n", r, WEXITSTATUS(st));
            failed++;
        }
    }
    ds_store_server_stop(srv);
    return failed;
}

#endif
