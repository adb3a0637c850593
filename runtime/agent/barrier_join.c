/* barrier_join.h: a barrier's arrivals on this node, joined into one request. */
#include "barrier_join.h"

#include <stdlib.h>
#include <string.h>

#include "store_proto.h"

typedef struct member {
    uint32_t tag, rank;
    int64_t deadline; /* -1: waits forever */
    int64_t send_by;  /* held no longer than this (half its timeout), -1: until the node's last rank */
    uint32_t utag;    /* the joined request it went in; 0 while held here */
    int waiting;      /* its rank still waits for an answer (not answered, not gone) */
} member;

/* One barrier (by name) this node takes part in. */
typedef struct group {
    uint8_t *name;
    size_t nlen;
    int came;    /* arrivals of this node (of the job's world, one rank each) */
    int pass;    /* a rank not of this node came: the rest goes on as it is */
    int flushed; /* what was held went to the store: later arrivals go at once */
    int nout;    /* joined requests the store has not answered */
    member *m;
    int nm, cap;
} group;

struct ds_bjoin {
    uint32_t world;
    int *ranks, nranks;
    ds_bjoin_ops ops;
    group **g;
    int ng, capg;
    uint32_t next_utag;
};

typedef struct req {
    int32_t timeout_ms;
    uint32_t world, n, rank;
    const uint8_t *name;
    size_t nlen;
} req;

static int parse(const uint8_t *body, size_t n, req *q) {
    ds_reader r = {body, n};
    uint32_t t;
    const uint8_t *ranks;
    if (ds_rd_u32(&r, &t) != 0 || ds_rd_u32(&r, &q->world) != 0 || ds_rd_u32(&r, &q->n) != 0 || q->n != 1 ||
        ds_rd_bytes(&r, 4, &ranks) != 0 || r.n == 0)
        return -1;
    q->timeout_ms = (int32_t)t;
    q->rank = ds_load_u32(ranks);
    q->name = r.p;
    q->nlen = r.n;
    return 0;
}

ds_bjoin *ds_bjoin_new(int world, const int *ranks, int nranks, ds_bjoin_ops ops) {
    ds_bjoin *j = calloc(1, sizeof *j);
    int *copy = malloc((size_t)(nranks > 0 ? nranks : 1) * sizeof *copy);
    if (!j || !copy) {
        free(j);
        free(copy);
        return NULL;
    }
    memcpy(copy, ranks, (size_t)nranks * sizeof *copy);
    *j = (ds_bjoin){.world = (uint32_t)world, .ranks = copy, .nranks = nranks, .ops = ops};
    return j;
}

static void group_free(group *g) {
    free(g->name);
    free(g->m);
    free(g);
}

void ds_bjoin_free(ds_bjoin *j) {
    if (!j) return;
    for (int i = 0; i < j->ng; i++) group_free(j->g[i]);
    free(j->g);
    free(j->ranks);
    free(j);
}

int ds_bjoin_count(const ds_bjoin *j) { return j->ng; }

static int is_ours(const ds_bjoin *j, uint32_t rank) {
    for (int i = 0; i < j->nranks; i++)
        if ((uint32_t)j->ranks[i] == rank) return 1;
    return 0;
}

static group *find(const ds_bjoin *j, const req *q) {
    for (int i = 0; i < j->ng; i++)
        if (j->g[i]->nlen == q->nlen && memcmp(j->g[i]->name, q->name, q->nlen) == 0) return j->g[i];
    return NULL;
}

static group *create(ds_bjoin *j, const req *q) {
    if (j->ng == j->capg) {
        int cap = j->capg ? 2 * j->capg : 8;
        group **gs = realloc(j->g, (size_t)cap * sizeof *gs);
        if (!gs) return NULL;
        j->g = gs;
        j->capg = cap;
    }
    group *g = calloc(1, sizeof *g);
    if (!g || !(g->name = malloc(q->nlen))) {
        free(g);
        return NULL;
    }
    memcpy(g->name, q->name, q->nlen);
    g->nlen = q->nlen;
    j->g[j->ng++] = g;
    return g;
}

/* Every rank of this node came and none waits for anything: forgotten. */
static void maybe_free(ds_bjoin *j, group *g) {
    if (g->came < j->nranks || g->nout > 0) return;
    for (int i = 0; i < g->nm; i++)
        if (g->m[i].waiting) return;
    for (int i = 0; i < j->ng; i++)
        if (j->g[i] == g) {
            j->g[i] = j->g[--j->ng];
            break;
        }
    group_free(g);
}

/* Sends what g holds as one request; its timeout is the longest its ranks have left. */
static int flush(ds_bjoin *j, group *g, int64_t now) {
    g->flushed = 1;
    int n = 0;
    int64_t longest = 0;
    for (int i = 0; i < g->nm; i++) {
        member *m = &g->m[i];
        if (m->utag) continue;
        n++;
        if (!m->waiting) continue;
        if (m->deadline < 0 || longest < 0) longest = -1;
        else if (m->deadline - now > longest) longest = m->deadline - now;
    }
    if (n == 0) return 0;
    size_t len = 12 + 4 * (size_t)n + g->nlen;
    uint8_t *body = malloc(len);
    if (!body) return -1;
    uint32_t utag = DS_BJOIN_TAG_BIT | (++j->next_utag & ~DS_BJOIN_TAG_BIT);
    ds_store_u32(body, (uint32_t)(longest < 0 ? -1 : longest > INT32_MAX ? INT32_MAX : longest));
    ds_store_u32(body + 4, j->world);
    ds_store_u32(body + 8, (uint32_t)n);
    uint8_t *p = body + 12;
    for (int i = 0; i < g->nm; i++)
        if (!g->m[i].utag) {
            ds_store_u32(p, g->m[i].rank);
            p += 4;
            g->m[i].utag = utag;
        }
    memcpy(p, g->name, g->nlen);
    int rc = j->ops.send(j->ops.ctx, utag, body, len);
    free(body);
    if (rc == 0) g->nout++;
    return rc;
}

int ds_bjoin_arrive(ds_bjoin *j, uint32_t tag, const uint8_t *body, size_t n, int64_t now) {
    req q;
    if (parse(body, n, &q) != 0 || q.world != j->world) return 0;
    group *g = find(j, &q);
    if (!g && !(g = create(j, &q))) return -1;
    g->came++;
    if (!is_ours(j, q.rank) && !g->pass) {
        g->pass = 1;
        if (flush(j, g, now) != 0) return -1;
    }
    if (g->pass) {
        maybe_free(j, g);
        return 0;
    }
    if (g->nm == g->cap) {
        int cap = g->cap ? 2 * g->cap : j->nranks > 0 ? j->nranks : 1;
        member *ms = realloc(g->m, (size_t)cap * sizeof *ms);
        if (!ms) return -1;
        g->m = ms;
        g->cap = cap;
    }
    g->m[g->nm++] = (member){.tag = tag, .rank = q.rank, .deadline = q.timeout_ms < 0 ? -1 : now + q.timeout_ms,
                             .send_by = q.timeout_ms < 0 ? -1 : now + q.timeout_ms / 2, .waiting = 1};
    if (g->flushed || g->came >= j->nranks) return flush(j, g, now) == 0 ? 1 : -1;
    return 1;
}

void ds_bjoin_answer(ds_bjoin *j, uint32_t utag, uint8_t status, const uint8_t *body, size_t n) {
    for (int i = 0; i < j->ng; i++) {
        group *g = j->g[i];
        int found = 0;
        for (int k = 0; k < g->nm; k++) {
            member *m = &g->m[k];
            if (m->utag != utag) continue;
            found = 1;
            if (m->waiting) {
                m->waiting = 0;
                j->ops.answer(j->ops.ctx, m->tag, status, body, n);
            }
        }
        if (found) {
            g->nout--;
            maybe_free(j, g);
            return;
        }
    }
}

static void sooner(int64_t *next, int64_t t) {
    if (t >= 0 && (*next < 0 || t < *next)) *next = t;
}

int64_t ds_bjoin_expire(ds_bjoin *j, int64_t now) {
    int64_t next = -1;
    for (int i = 0; i < j->ng; i++) {
        group *g = j->g[i];
        int due = 0;
        for (int k = 0; k < g->nm; k++) due |= !g->m[k].utag && g->m[k].send_by >= 0 && now >= g->m[k].send_by;
        if (due && flush(j, g, now) != 0) sooner(&next, now + 10); /* out of memory: again soon */
        for (int k = 0; k < g->nm; k++) {
            member *m = &g->m[k];
            if (!m->utag) sooner(&next, m->send_by);
            if (!m->waiting || m->deadline < 0) continue;
            if (now < m->deadline || !m->utag) {
                sooner(&next, m->deadline < now ? now + 10 : m->deadline);
                continue;
            }
            m->waiting = 0;
            j->ops.answer(j->ops.ctx, m->tag, DS_STORE_TIMEOUT, (const uint8_t *)"", 0);
        }
    }
    for (int i = j->ng - 1; i >= 0; i--) maybe_free(j, j->g[i]);
    return next;
}

int ds_bjoin_gone(ds_bjoin *j, uint32_t tag) {
    for (int i = 0; i < j->ng; i++) {
        group *g = j->g[i];
        for (int k = 0; k < g->nm; k++)
            if (g->m[k].tag == tag && g->m[k].waiting) {
                g->m[k].waiting = 0;
                maybe_free(j, g);
                return 1;
            }
    }
    return 0;
}
