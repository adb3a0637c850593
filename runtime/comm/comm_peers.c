/* What the ranks of one communicator tell each other through the job's store, for a
 * backend whose transport cannot say it (NCCL: its kernels just wait for a peer that is
 * gone): a value made by rank 0 (NCCL's unique id), and the first rank's failure, so a
 * rank waiting in a collective stops and names the peer instead of hanging. Keys live
 * under the open's prefix ("comm/<attempt>/<n>/"), so every attempt starts clean. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_backend.h"
#include "ds_clock.h"

/* Between looks at the store while waiting for rank 0's value. */
#define SHARE_POLL_MIN_MS 5
#define SHARE_POLL_MAX_MS 100

void ds_comm_peers_init(ds_comm_peers *p, const ds_comm_join *j) {
    memset(p, 0, sizeof *p);
    p->store = j->store;
    p->rank = j->rank;
    snprintf(p->host, sizeof p->host, "%s", j->node_addr ? j->node_addr : "?");
    snprintf(p->failed_key, sizeof p->failed_key, "%sfailed", j->prefix);
    snprintf(p->prefix, sizeof p->prefix, "%s", j->prefix);
}

void ds_comm_peers_publish(ds_comm_peers *p, const char *why) {
    if (!p->store) return;
    char msg[1200];
    int n = snprintf(msg, sizeof msg, "rank %d (%s): %s", p->rank, p->host, why);
    if (n < 0) return;
    if ((size_t)n >= sizeof msg) n = (int)sizeof msg - 1;
    ds_err ignored;
    int exists = 0;
    const char *key = p->failed_key;
    /* the first failure is what the others report; later ones are its consequences */
    if (ds_store_check(p->store, &key, 1, &exists, &ignored) == 0 && !exists)
        ds_store_set(p->store, key, msg, (size_t)n, &ignored);
}

int ds_comm_peers_failed(ds_comm_peers *p, const char *what, ds_err *err) {
    if (!p->store) return 0;
    ds_err ignored;
    int exists = 0;
    const char *key = p->failed_key;
    if (ds_store_check(p->store, &key, 1, &exists, &ignored) != 0 || !exists) return 0;
    void *val = NULL;
    size_t len = 0;
    if (ds_store_get(p->store, key, &val, &len, 1000, &ignored) != 0) val = NULL;
    ds_err_set(err, "%s: stopped: peer %s", what, val ? (const char *)val : "failed");
    free(val);
    return 1;
}

static void pause_ms(int ms) {
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

int ds_comm_peers_share(ds_comm_peers *p, const char *name, void *val, size_t len,
                        int (*make)(void *val, size_t len, ds_err *err), int timeout_ms,
                        ds_err *err) {
    char key[300];
    snprintf(key, sizeof key, "%s%s", p->prefix, name);
    if (p->rank == 0) {
        if (make(val, len, err) != 0 || ds_store_set(p->store, key, val, len, err) != 0) {
            ds_comm_peers_publish(p, err->msg);
            return -1;
        }
        return 0;
    }
    long long deadline = ds_now_ms() + timeout_ms;
    const char *k = key;
    for (int wait = SHARE_POLL_MIN_MS;; wait = wait * 2 > SHARE_POLL_MAX_MS ? SHARE_POLL_MAX_MS : wait * 2) {
        int exists = 0;
        if (ds_store_check(p->store, &k, 1, &exists, err) != 0) return -1;
        if (exists) break;
        if (ds_comm_peers_failed(p, name, err)) return -1;
        if (ds_now_ms() > deadline)
            return ds_err_set(err, "%s: rank 0 did not share it within %d ms", key, timeout_ms);
        pause_ms(wait);
    }
    void *got = NULL;
    size_t n = 0;
    if (ds_store_get(p->store, key, &got, &n, timeout_ms, err) != 0) return -1;
    int rc = 0;
    if (n != len) rc = ds_err_set(err, "%s: %zu bytes from rank 0, expected %zu", key, n, len);
    else memcpy(val, got, len);
    free(got);
    return rc;
}
