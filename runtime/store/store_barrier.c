/* Barrier on the store: one BARRIER request (store_proto.h) per rank, which the store
 * answers once all `world` ranks have arrived. The store counts the arrivals itself, so
 * the barrier needs no keys of its own and leaves nothing behind; through an agent the
 * node's ranks arrive as one request (runtime/agent/barrier_join.c), so the store sees
 * one per node. On timeout a second request asks who arrived, for the message.
 *
 *   barrier/<name>   the barrier's name at the store (after the client's prefix) */
#include <stdio.h>
#include <string.h>

#include "store_client.h"
#include "store_proto.h"

#define DS_BARRIER_KEY_MAX 1100 /* "barrier/" + name (<= 1024) */

int ds_store_barrier_who(ds_store_client *c, const char *key, int world, int *arrived, int *missing,
                         char *list, size_t cap, int *nlisted, ds_err *err) {
    int listed[DS_STORE_BARRIER_LISTED];
    if (ds_store_barrier_status(c, key, world, arrived, missing, listed, nlisted, err) != 0) return -1;
    size_t n = 0;
    if (cap) list[0] = 0;
    for (int i = 0; i < *nlisted && n + 16 < cap; i++)
        n += (size_t)snprintf(list + n, cap - n, "%s%d", i ? ", " : "", listed[i]);
    return 0;
}

int ds_store_barrier(ds_store_client *c, const char *name, int rank, int world, int timeout_ms, ds_err *err) {
    if (world < 1 || rank < 0 || rank >= world)
        return ds_err_set(err, "barrier '%s': rank %d outside a world of %d", name, rank, world);
    if (strlen(name) > 1024) return ds_err_set(err, "barrier '%.40s...': name over 1024 bytes", name);
    char key[DS_BARRIER_KEY_MAX];
    snprintf(key, sizeof key, "barrier/%s", name);
    int rc = ds_store_barrier_arrive(c, key, rank, world, timeout_ms, err);
    if (rc <= 0) return rc;
    int arrived = 0, missing = 0, nlisted = 0;
    char list[256];
    ds_err ignored;
    if (ds_store_barrier_who(c, key, world, &arrived, &missing, list, sizeof list, &nlisted, &ignored) != 0)
        return ds_err_set(err, "barrier '%s' at %s: timed out after %g s (rank %d); asking who arrived: %s", name,
                          ds_store_where(c), timeout_ms / 1000.0, rank, ignored.msg);
    ds_err_set(err, "barrier '%s' at %s: timed out after %g s (rank %d): %d of %d ranks arrived", name,
               ds_store_where(c), timeout_ms / 1000.0, rank, arrived, world);
    if (err && missing > 0) {
        size_t len = strlen(err->msg);
        snprintf(err->msg + len, sizeof err->msg - len, "; missing rank%s %s%s", missing > 1 ? "s" : "", list,
                 missing > nlisted ? ", ..." : "");
    }
    return -1;
}
