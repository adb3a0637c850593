/* wait_join.h: identical waits of a node's ranks, one request at the store. */
#include "wait_join.h"

#include <stdlib.h>
#include <string.h>

#include "store_proto.h"

typedef struct member {
    uint32_t tag;
    int64_t deadline; /* -1: forever */
} member;

/* A GET or WAIT at the store, sent under its first rank's tag. */
typedef struct out {
    uint32_t tag;
    uint8_t op;
    uint8_t *keys; /* its body after the timeout: what a joining request must match */
    size_t klen;
    int64_t deadline;
    int owner_waiting; /* the rank that sent it still waits for it */
    member *m;         /* ranks joined to it */
    int nm, cap;
} out;

struct ds_wjoin {
    ds_wjoin_ops ops;
    out **o;
    int n, cap;
};

ds_wjoin *ds_wjoin_new(ds_wjoin_ops ops) {
    ds_wjoin *w = calloc(1, sizeof *w);
    if (w) w->ops = ops;
    return w;
}

static void out_free(out *o) {
    free(o->keys);
    free(o->m);
    free(o);
}

void ds_wjoin_free(ds_wjoin *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) out_free(w->o[i]);
    free(w->o);
    free(w);
}

int ds_wjoin_count(const ds_wjoin *w) { return w->n; }

static void remove_at(ds_wjoin *w, int i) {
    out_free(w->o[i]);
    w->o[i] = w->o[--w->n];
}

int ds_wjoin_request(ds_wjoin *w, uint32_t tag, uint8_t op, const uint8_t *body, size_t n, int64_t now) {
    if ((op != DS_STORE_OP_GET && op != DS_STORE_OP_WAIT) || n < 4) return 0;
    int32_t t = (int32_t)ds_load_u32(body);
    int64_t deadline = t < 0 ? -1 : now + t;
    const uint8_t *keys = body + 4;
    size_t klen = n - 4;
    for (int i = 0; i < w->n; i++) {
        out *o = w->o[i];
        if (o->op != op || o->klen != klen || memcmp(o->keys, keys, klen) != 0) continue;
        if (o->nm == o->cap) {
            int cap = o->cap ? 2 * o->cap : 8;
            member *ms = realloc(o->m, (size_t)cap * sizeof *ms);
            if (!ms) return -1;
            o->m = ms;
            o->cap = cap;
        }
        o->m[o->nm++] = (member){tag, deadline};
        return 1;
    }
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 16;
        out **os = realloc(w->o, (size_t)cap * sizeof *os);
        if (!os) return -1;
        w->o = os;
        w->cap = cap;
    }
    out *o = calloc(1, sizeof *o);
    if (!o || !(o->keys = malloc(klen ? klen : 1))) {
        free(o);
        return -1;
    }
    memcpy(o->keys, keys, klen);
    *o = (out){.tag = tag, .op = op, .keys = o->keys, .klen = klen, .deadline = deadline, .owner_waiting = 1};
    w->o[w->n++] = o;
    return 0;
}

/* o timed out at the store, but its first joined rank still has time: the same request
 * goes again under that rank's tag, with what it has left; the others join it. */
static int again(ds_wjoin *w, out *o, int64_t now) {
    member first = o->m[0];
    int64_t left = first.deadline < 0 ? -1 : first.deadline - now;
    size_t n = 4 + o->klen;
    uint8_t *body = malloc(n);
    if (!body) return -1;
    ds_store_u32(body, (uint32_t)(left < 0 ? -1 : left > INT32_MAX ? INT32_MAX : (int32_t)left));
    memcpy(body + 4, o->keys, o->klen);
    int rc = w->ops.send(w->ops.ctx, first.tag, o->op, body, n);
    free(body);
    if (rc != 0) return -1;
    o->tag = first.tag;
    o->deadline = first.deadline;
    o->owner_waiting = 1;
    o->m[0] = o->m[--o->nm];
    return 0;
}

void ds_wjoin_answer(ds_wjoin *w, uint32_t tag, uint8_t status, const uint8_t *body, size_t n, int64_t now) {
    for (int i = 0; i < w->n; i++) {
        out *o = w->o[i];
        if (o->tag != tag) continue;
        int kept = 0;
        for (int k = 0; k < o->nm; k++) {
            member m = o->m[k];
            if (status == DS_STORE_TIMEOUT && (m.deadline < 0 || m.deadline > now)) o->m[kept++] = m;
            else w->ops.answer(w->ops.ctx, m.tag, status, body, n);
        }
        o->nm = kept;
        if (o->nm == 0) {
            remove_at(w, i);
        } else if (again(w, o, now) != 0) { /* out of memory: they are told as the store said */
            for (int k = 0; k < o->nm; k++) w->ops.answer(w->ops.ctx, o->m[k].tag, status, body, n);
            remove_at(w, i);
        }
        return;
    }
}

/* Nobody waits for o any more: the store forgets it. */
static int orphaned(ds_wjoin *w, int i) {
    out *o = w->o[i];
    if (o->owner_waiting || o->nm > 0) return 0;
    w->ops.cancel(w->ops.ctx, o->tag);
    remove_at(w, i);
    return 1;
}

int64_t ds_wjoin_expire(ds_wjoin *w, int64_t now) {
    int64_t next = -1;
    for (int i = w->n - 1; i >= 0; i--) {
        out *o = w->o[i];
        int kept = 0;
        for (int k = 0; k < o->nm; k++) {
            member m = o->m[k];
            if (m.deadline >= 0 && now >= m.deadline) {
                w->ops.answer(w->ops.ctx, m.tag, DS_STORE_TIMEOUT, (const uint8_t *)"", 0);
                continue;
            }
            if (m.deadline >= 0 && (next < 0 || m.deadline < next)) next = m.deadline;
            o->m[kept++] = m;
        }
        o->nm = kept;
        orphaned(w, i);
    }
    return next;
}

int ds_wjoin_gone(ds_wjoin *w, uint32_t tag) {
    for (int i = 0; i < w->n; i++) {
        out *o = w->o[i];
        if (o->tag == tag) {
            o->owner_waiting = 0;
            if (o->nm > 0) return 0; /* others still wait for its answer */
            remove_at(w, i);
            return 1;
        }
        for (int k = 0; k < o->nm; k++)
            if (o->m[k].tag == tag) {
                o->m[k] = o->m[--o->nm];
                orphaned(w, i);
                return 0;
            }
    }
    return 1;
}
