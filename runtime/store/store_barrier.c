/* Barrier on the store. Each rank sets its own arrival key, then bumps a counter; the
 * rank that brings it to `world` sets the release key everyone waits on. The arrival
 * keys cost one request each but let a timeout say exactly which ranks never came.
 * On the way out each rank deletes its arrival key and counts itself out; the last one
 * out deletes the counter and the release key, so a script that calls a barrier every
 * step does not grow the store.
 *
 *   barrier/<name>/r<rank>  arrival of one rank ("1")
 *   barrier/<name>/n        ranks arrived and not yet left (ADD counter)
 *   barrier/<name>/go       set by the last rank to arrive */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store_client.h"

#define MAX_MISSING_LISTED 16
#define DS_BARRIER_KEY_MAX 1100 /* "barrier/" + name (<= 1024) + "/r" + rank */

/* Appends "; missing ranks 2, 5, ..." to err by checking the arrival keys. */
static void name_missing(ds_store_client *c, const char *name, int world, ds_err *err) {
    char list[256] = "";
    int listed = 0, missing = 0, n = 0;
    for (int r = 0; r < world; r++) {
        char key[DS_BARRIER_KEY_MAX];
        snprintf(key, sizeof key, "barrier/%s/r%d", name, r);
        const char *keys[1] = {key};
        int exists;
        ds_err ignored;
        if (ds_store_check(c, keys, 1, &exists, &ignored) != 0) return;
        if (exists) continue;
        missing++;
        if (listed < MAX_MISSING_LISTED && n < (int)sizeof list - 16)
            n += snprintf(list + n, sizeof list - (size_t)n, "%s%d", listed++ ? ", " : "", r);
    }
    if (!err || missing == 0) return;
    size_t len = strlen(err->msg);
    snprintf(err->msg + len, sizeof err->msg - len, "; missing rank%s %s%s", missing > 1 ? "s" : "", list,
             missing > listed ? ", ..." : "");
}

int ds_store_barrier(ds_store_client *c, const char *name, int rank, int world, int timeout_ms, ds_err *err) {
    if (world < 1 || rank < 0 || rank >= world)
        return ds_err_set(err, "barrier '%s': rank %d outside a world of %d", name, rank, world);
    if (strlen(name) > 1024) return ds_err_set(err, "barrier '%.40s...': name over 1024 bytes", name);
    char arrive[DS_BARRIER_KEY_MAX], count[DS_BARRIER_KEY_MAX], go[DS_BARRIER_KEY_MAX];
    snprintf(arrive, sizeof arrive, "barrier/%s/r%d", name, rank);
    snprintf(count, sizeof count, "barrier/%s/n", name);
    snprintf(go, sizeof go, "barrier/%s/go", name);
    int64_t n;
    if (ds_store_set(c, arrive, "1", 1, err) != 0 || ds_store_add(c, count, 1, &n, err) != 0)
        return ds_err_prefix(err, "barrier '%s' (rank %d of %d)", name, rank, world);
    if (n == world && ds_store_set(c, go, "1", 1, err) != 0)
        return ds_err_prefix(err, "barrier '%s' (rank %d of %d)", name, rank, world);
    const char *keys[1] = {go};
    if (ds_store_wait(c, keys, 1, timeout_ms, err) == 0) {
        /* Everyone has arrived, so nobody needs this rank's key to say who is missing.
         * The count only falls after it reached world, so 0 means everyone has left. */
        if (ds_store_delete(c, arrive, NULL, err) != 0 || ds_store_add(c, count, -1, &n, err) != 0 ||
            (n == 0 && (ds_store_delete(c, go, NULL, err) != 0 || ds_store_delete(c, count, NULL, err) != 0)))
            return ds_err_prefix(err, "barrier '%s' (rank %d of %d), leaving", name, rank, world);
        return 0;
    }
    if (!strstr(err ? err->msg : "", "timed out")) return ds_err_prefix(err, "barrier '%s' (rank %d of %d)", name, rank, world);
    /* Timed out: count again (0 added) so the message is current, then name who is missing. */
    int64_t arrived = n;
    ds_err ignored;
    ds_store_add(c, count, 0, &arrived, &ignored);
    ds_err_set(err, "barrier '%s' at %s: timed out after %g s (rank %d): %" PRId64 " of %d ranks arrived", name,
               ds_store_where(c), timeout_ms / 1000.0, rank, arrived, world);
    name_missing(c, name, world, err);
    return -1;
}
