/* Rendezvous store throughput and barrier latency on loopback, server in this process
 * (its own thread, as in dslaunch). Clients are threads with one connection each.
 *   bench_store [barrier_clients=64] [barriers=50] [ops=20000]
 * Prints a table, then one JSON object per line per configuration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_client.h"
#include "store_server.h"
#include "ds_clock.h"

static int port;
static char token[DS_STORE_TOKEN_LEN + 1];

static ds_store_client *connect_or_die(void) {
    ds_err err;
    ds_store_client *c = ds_store_connect("127.0.0.1", port, token, 10000, &err);
    if (!c) {
        fprintf(stderr, "bench_store: %s\n", err.msg);
        exit(1);
    }
    return c;
}

static void die(const ds_err *err) {
    fprintf(stderr, "bench_store: %s\n", err->msg);
    exit(1);
}

typedef struct job {
    int id, nops, world, nbarriers;
    pthread_barrier_t *start;
    double seconds; /* what this thread measured */
} job;

static void *setget_thread(void *arg) {
    job *j = arg;
    ds_store_client *c = connect_or_die();
    char key[64], val[64];
    memset(val, 'v', sizeof val);
    ds_err err;
    pthread_barrier_wait(j->start);
    int64_t t0 = ds_now_ms();
    for (int i = 0; i < j->nops; i++) {
        snprintf(key, sizeof key, "bench/%d/%d", j->id, (i / 2) % 1000); /* get what was just set */
        if (i % 2 == 0) {
            if (ds_store_set(c, key, val, sizeof val, &err) != 0) die(&err);
        } else {
            void *v;
            size_t len;
            if (ds_store_get(c, key, &v, &len, 1000, &err) != 0) die(&err);
            free(v);
        }
    }
    j->seconds = (ds_now_ms() - t0) / 1000.0;
    ds_store_close(c);
    return NULL;
}

static void *barrier_thread(void *arg) {
    job *j = arg;
    ds_store_client *c = connect_or_die();
    ds_err err;
    char name[32];
    pthread_barrier_wait(j->start);
    int64_t t0 = ds_now_ms();
    for (int b = 0; b < j->nbarriers; b++) {
        snprintf(name, sizeof name, "b%d", b);
        if (ds_store_barrier(c, name, j->id, j->world, 30000, &err) != 0) die(&err);
    }
    j->seconds = (ds_now_ms() - t0) / 1000.0;
    ds_store_close(c);
    return NULL;
}

/* Runs n threads of fn; returns the slowest thread's seconds. */
static double run(void *(*fn)(void *), int n, int nops, int nbarriers) {
    pthread_t *t = calloc((size_t)n, sizeof *t);
    job *j = calloc((size_t)n, sizeof *j);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) {
        j[i] = (job){.id = i, .nops = nops, .world = n, .nbarriers = nbarriers, .start = &start};
        pthread_create(&t[i], NULL, fn, &j[i]);
    }
    double worst = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        if (j[i].seconds > worst) worst = j[i].seconds;
    }
    pthread_barrier_destroy(&start);
    free(t);
    free(j);
    return worst;
}

int main(int argc, char **argv) {
    int bclients = argc > 1 ? atoi(argv[1]) : 64;
    int nbarriers = argc > 2 ? atoi(argv[2]) : 50;
    int nops = argc > 3 ? atoi(argv[3]) : 20000;
    ds_err err;
    ds_store_server *srv;
    if (ds_store_make_token(token, &err) != 0 || ds_store_server_start("127.0.0.1", 0, token, &srv, &err) != 0)
        die(&err);
    port = ds_store_server_port(srv);

    printf("%-28s %8s %14s %16s\n", "measure", "clients", "ops/s", "latency_ms");
    static const int setget_clients[] = {1, 8, 64};
    char json[8][256];
    int nj = 0;
    for (size_t k = 0; k < sizeof setget_clients / sizeof *setget_clients; k++) {
        int n = setget_clients[k];
        int per = nops / n;
        double s = run(setget_thread, n, per, 0);
        double ops = (double)per * n / s;
        printf("%-28s %8d %14.0f %16.4f\n", "set/get 64 B (half each)", n, ops, 1000.0 * s / per);
        snprintf(json[nj++], sizeof json[0],
                 "{\"bench\":\"store_setget\",\"clients\":%d,\"value_bytes\":64,\"ops\":%d,\"ops_per_s\":%.0f,"
                 "\"mean_latency_ms\":%.4f}", n, per * n, ops, 1000.0 * s / per);
    }
    double s = run(barrier_thread, bclients, 0, nbarriers);
    printf("%-28s %8d %14.0f %16.3f\n", "barrier (1 request/rank)", bclients, nbarriers / s, 1000.0 * s / nbarriers);
    snprintf(json[nj++], sizeof json[0],
             "{\"bench\":\"store_barrier\",\"clients\":%d,\"barriers\":%d,\"barrier_latency_ms\":%.3f}", bclients,
             nbarriers, 1000.0 * s / nbarriers);
    for (int i = 0; i < nj; i++) printf("%s\n", json[i]);
    ds_store_server_stop(srv);
    return 0;
}
