/* The node's half of a two-level barrier (docs/rendezvous.md). The agent's store mux
 * (store_mux.c) hands it each BARRIER a rank sends; the node's ranks meet here, and once
 * all of them have arrived one BARRIER carrying their ranks goes to the store, whose
 * answer is handed to each of them. The store then sees one arrival per node, not one
 * per rank.
 *
 * What it joins: barriers of the job's whole world (world == the job's world) whose rank
 * is one of this node's. Anything else (another world, a request carrying several ranks)
 * goes to the store as it is. Should a rank that is not this node's arrive at a barrier
 * this node is holding, the numbering is not the job's: what is held goes at once and
 * the rest of that barrier passes through. Timeouts: an arrival is held at most half
 * its timeout, then what the node holds goes to the store anyway, so a rank elsewhere
 * that times out is told who arrived (all but the ranks that arrived in the last half
 * of its timeout on a node that still misses one of its own); a rank's own timeout is
 * answered TIMEOUT by the node when due, as the store would.
 *
 * No I/O here: the mux gives it requests, answers and the clock, and it calls back to
 * send upstream and to answer a rank. One thread (the mux's). */
#ifndef DS_BARRIER_JOIN_H
#define DS_BARRIER_JOIN_H

#include <stddef.h>
#include <stdint.h>

/* Upstream tags of joined requests have this bit; the mux's rank tags never do. */
#define DS_BJOIN_TAG_BIT 0x80000000u

typedef struct ds_bjoin_ops {
    void *ctx;
    /* Sends a BARRIER body (store_proto.h, after the op byte) to the store as TAGGED utag;
     * 0, or -1 when it could not (out of memory). */
    int (*send)(void *ctx, uint32_t utag, const uint8_t *body, size_t n);
    /* Answers the rank request of tag: status and body as the store would have. */
    void (*answer)(void *ctx, uint32_t tag, uint8_t status, const uint8_t *body, size_t n);
} ds_bjoin_ops;

typedef struct ds_bjoin ds_bjoin;

/* world: the job's world; ranks: this node's ranks (nranks of them). NULL: out of memory. */
ds_bjoin *ds_bjoin_new(int world, const int *ranks, int nranks, ds_bjoin_ops ops);
void ds_bjoin_free(ds_bjoin *j);

/* A rank's BARRIER body on tag, at now (ms, ds_now_ms). 1: taken (it will be answered
 * through ops.answer), 0: not one to join, send it on as it is; -1: out of memory. */
int ds_bjoin_arrive(ds_bjoin *j, uint32_t tag, const uint8_t *body, size_t n, int64_t now);
/* The store's answer to utag (a tag with DS_BJOIN_TAG_BIT): handed to its ranks. */
void ds_bjoin_answer(ds_bjoin *j, uint32_t utag, uint8_t status, const uint8_t *body, size_t n);
/* Sends what was held half its timeout; ranks whose timeout is due are answered
 * TIMEOUT. Returns when to call it next (ms), -1: no need. */
int64_t ds_bjoin_expire(ds_bjoin *j, int64_t now);
/* The rank connection of tag went away: 1 when its request was one of these (its
 * arrival stays counted, as a rank that left a key-based barrier did), else 0. */
int ds_bjoin_gone(ds_bjoin *j, uint32_t tag);
/* Barriers being joined now (tests). */
int ds_bjoin_count(const ds_bjoin *j);

#endif
