/* BARRIER requests (store_proto.h): the store counts a barrier's arrivals itself. One
 * request may carry several ranks (an agent arrives once for its node's ranks,
 * runtime/agent/barrier_join.c), so a barrier costs the store one request per node, not
 * five per rank as the key-based barrier did. A barrier is named by a key; its record
 * keeps a bit per rank, so a timeout can say who is missing, and is freed once it has
 * released its waiters: a barrier per training step does not grow the store.
 *
 * Waiting reuses the key index (store_waiters.c) on a pseudo-key: the name behind a NUL
 * byte, which no real key holds, so a barrier's release wakes exactly its waiters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_server_impl.h"

typedef struct sbarrier {
    uint32_t world, arrived;
    int done;     /* every rank arrived: waiters are answered OK */
    int waiting;  /* waiters on it; a done barrier is freed when none is left */
    uint8_t seen[]; /* a bit per rank */
} sbarrier;

typedef struct barrier_req {
    int32_t timeout_ms;
    uint32_t world, n;
    const uint8_t *ranks; /* n big-endian u32 */
    const uint8_t *name;
    size_t nlen;
} barrier_req;

static int reject(request *q, const char *why) {
    snprintf(q->why, sizeof q->why, "%s", why);
    return REJECT;
}

static int parse(request *q, barrier_req *b) {
    uint32_t t;
    ds_reader r = q->body;
    if (ds_rd_u32(&r, &t) != 0 || ds_rd_u32(&r, &b->world) != 0 || ds_rd_u32(&r, &b->n) != 0)
        return reject(q, "truncated BARRIER");
    b->timeout_ms = (int32_t)t;
    if (b->world == 0 || b->world > DS_STORE_MAX_BARRIER_WORLD) return reject(q, "BARRIER world out of range");
    if (b->n > b->world || ds_rd_bytes(&r, (size_t)b->n * 4, &b->ranks) != 0)
        return reject(q, "BARRIER rank list longer than its world or truncated");
    b->name = r.p;
    b->nlen = r.n;
    const char *bad = b->nlen > DS_STORE_MAX_KEY ? "BARRIER name over the key limit" : ds_store_key_problem(r.p, r.n);
    return bad ? reject(q, bad) : DONE;
}

static sbarrier *find(ds_store_server *s, const barrier_req *b) {
    ds_store_entry *e = ds_store_map_get(&s->barriers, b->name, b->nlen);
    return e ? (sbarrier *)e->val : NULL;
}

static sbarrier *create(ds_store_server *s, const barrier_req *b) {
    size_t size = sizeof(sbarrier) + (b->world + 7) / 8;
    sbarrier *sb = calloc(1, size);
    if (!sb) return NULL;
    sb->world = b->world;
    if (ds_store_map_put(&s->barriers, b->name, b->nlen, (uint8_t *)sb, size) != 0) {
        free(sb);
        return NULL;
    }
    return sb;
}

static int seen(const sbarrier *sb, uint32_t r) { return sb->seen[r / 8] >> (r % 8) & 1; }

/* The pseudo-key its waiters wait on: NUL, then the name. */
static size_t wait_key(const barrier_req *b, uint8_t *key) {
    key[0] = 0;
    memcpy(key + 1, b->name, b->nlen);
    return b->nlen + 1;
}

static int error(request *q, const barrier_req *b, const char *what) {
    char msg[300];
    int n = snprintf(msg, sizeof msg, "barrier '%.*s': %s", (int)(b->nlen < 120 ? b->nlen : 120), (const char *)b->name, what);
    return ds_store_reply(q, DS_STORE_ERROR, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1, NULL, 0);
}

/* nranks = 0: how many arrived and who is missing (the first DS_STORE_BARRIER_LISTED), at once. */
static int status(request *q, const barrier_req *b, const sbarrier *sb) {
    uint8_t out[8 + 4 * DS_STORE_BARRIER_LISTED];
    uint32_t arrived = sb ? (sb->done ? sb->world : sb->arrived) : 0, nmissing = b->world - arrived, listed = 0;
    if (sb && sb->world != b->world) return error(q, b, "asked with another world than its ranks arrived with");
    for (uint32_t r = 0; r < b->world && listed < DS_STORE_BARRIER_LISTED && nmissing; r++)
        if (!sb || (!sb->done && !seen(sb, r))) ds_store_u32(out + 8 + 4 * listed++, r);
    ds_store_u32(out, arrived);
    ds_store_u32(out + 4, nmissing);
    return ds_store_reply(q, DS_STORE_OK, out, 8 + 4 * (size_t)listed, NULL, 0);
}

/* Checks every rank of the request before counting any, so an error counts none. */
static const char *arrive(sbarrier *sb, const barrier_req *b, char *why, size_t cap) {
    if (sb->world != b->world) {
        snprintf(why, cap, "a world of %u here, %u at a rank that arrived before", b->world, sb->world);
        return why;
    }
    if (sb->done) return "already passed (a barrier's name is for one use)";
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t r = ds_load_u32(b->ranks + 4 * i);
        if (r >= b->world) {
            snprintf(why, cap, "rank %u outside a world of %u", r, b->world);
            return why;
        }
        for (uint32_t j = 0; j < i; j++)
            if (ds_load_u32(b->ranks + 4 * j) == r) r = b->world; /* twice in the request */
        if (r == b->world || seen(sb, r)) {
            snprintf(why, cap, "rank %u arrived twice", ds_load_u32(b->ranks + 4 * i));
            return why;
        }
    }
    for (uint32_t i = 0; i < b->n; i++) {
        uint32_t r = ds_load_u32(b->ranks + 4 * i);
        sb->seen[r / 8] |= (uint8_t)(1u << (r % 8));
    }
    sb->arrived += b->n;
    return NULL;
}

int ds_store_do_barrier(request *q) {
    barrier_req b;
    if (parse(q, &b) != DONE) return REJECT;
    ds_store_server *s = q->s;
    sbarrier *sb = find(s, &b);
    if (b.n == 0) return status(q, &b, sb);
    uint8_t key[DS_STORE_MAX_KEY + 1];
    size_t klen = wait_key(&b, key);
    if (q->w) { /* a waiter evaluated again: released, or still waiting (or timed out) */
        if (!sb || sb->done) return ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
        return ds_store_wait_on(q, b.timeout_ms, key, klen);
    }
    if (!sb && !(sb = create(s, &b))) return reject(q, "out of memory for a barrier");
    char why[160];
    const char *bad = arrive(sb, &b, why, sizeof why);
    if (bad) return error(q, &b, bad);
    if (sb->arrived == sb->world) {
        sb->done = 1;
        ds_store_key_set(s, key, klen);
        if (sb->waiting == 0) ds_store_map_delete(&s->barriers, b.name, b.nlen);
        return ds_store_reply(q, DS_STORE_OK, NULL, 0, NULL, 0);
    }
    int rc = ds_store_wait_on(q, b.timeout_ms, key, klen);
    if (q->w) sb->waiting++; /* ds_store_barrier_left takes it off when the waiter goes */
    return rc;
}

void ds_store_barrier_left(ds_store_server *s, const waiter *w) {
    request q = {.s = s, .body = {w->body, w->blen}};
    barrier_req b;
    if (parse(&q, &b) != DONE) return;
    sbarrier *sb = find(s, &b);
    if (sb && --sb->waiting == 0 && sb->done) ds_store_map_delete(&s->barriers, b.name, b.nlen);
}
