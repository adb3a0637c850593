/* Waits of a node's ranks joined at their agent (docs/rendezvous.md): a GET or WAIT
 * that asks for exactly what another rank of the node is already waiting for at the
 * store (same op, same keys) is not sent again; it waits for that one's answer, which
 * the agent hands to both. A communicator's rendezvous (every rank waits for the same
 * keys) then costs the store one waiting request per node, not one per rank.
 *
 * Timeouts stay each rank's own: the agent answers a joined request TIMEOUT when its
 * timeout is due; when the one at the store times out first, the same request goes
 * again for the joined ranks that still have time (with what the first of them has
 * left). The request at the store stays there while any rank waits for it, even when
 * the rank that sent it went away; when nobody waits any more it is cancelled.
 *
 * No I/O: the mux (store_mux.c) calls it and it calls back to answer a rank or cancel a
 * request at the store. One thread (the mux's). */
#ifndef DS_WAIT_JOIN_H
#define DS_WAIT_JOIN_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds_wjoin_ops {
    void *ctx;
    /* Sends a request (op, body after the op byte) to the store under tag; 0, or -1
     * when out of memory. */
    int (*send)(void *ctx, uint32_t tag, uint8_t op, const uint8_t *body, size_t n);
    /* Answers the rank request of tag with the store's status and body. */
    void (*answer)(void *ctx, uint32_t tag, uint8_t status, const uint8_t *body, size_t n);
    /* The request at the store under tag waits for nobody any more: cancel it. */
    void (*cancel)(void *ctx, uint32_t tag);
} ds_wjoin_ops;

typedef struct ds_wjoin ds_wjoin;

ds_wjoin *ds_wjoin_new(ds_wjoin_ops ops);
void ds_wjoin_free(ds_wjoin *w);

/* A rank's GET or WAIT (op, its body after the op byte) on tag at now (ms). 1: joined
 * to one at the store; 0: send it on as it is, under tag (others may join it); -1: out
 * of memory. Other ops: 0. */
int ds_wjoin_request(ds_wjoin *w, uint32_t tag, uint8_t op, const uint8_t *body, size_t n, int64_t now);
/* The store answered the request sent under tag, at now: the ranks joined to it get the
 * same (on TIMEOUT, those with time left wait on, as above). */
void ds_wjoin_answer(ds_wjoin *w, uint32_t tag, uint8_t status, const uint8_t *body, size_t n, int64_t now);
/* Joined requests whose timeout is due are answered TIMEOUT. Returns the next
 * deadline, -1: none. */
int64_t ds_wjoin_expire(ds_wjoin *w, int64_t now);
/* The rank connection of tag went away while its request was out. 1: it was the only
 * one waiting for the request at the store under tag (cancel it, as without joining);
 * 0: others wait for it, or tag's request was joined to another (nothing to cancel). */
int ds_wjoin_gone(ds_wjoin *w, uint32_t tag);
/* Requests at the store that others may join (tests). */
int ds_wjoin_count(const ds_wjoin *w);

#endif
