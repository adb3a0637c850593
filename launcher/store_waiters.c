/* Requests that wait for keys (GET of a missing key, WAIT). Each waiter is registered on
 * the first key it misses, in an index from key to waiters, so setting a key looks again
 * only at the requests that wait for that key: a barrier's release wakes its W waiters
 * once, instead of every blocked client being evaluated on every change. A WAIT for
 * several keys moves on to the next missing key when woken. Deadlines are checked when
 * the earliest one is due (s->next_due_ms), not on every pass. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_clock.h"
#include "store_server_impl.h"

static waitlist *list_of(ds_store_server *s, const uint8_t *key, size_t klen, int create) {
    ds_store_entry *e = ds_store_map_get(&s->waiting, key, klen);
    if (e || !create) return e ? (waitlist *)e->val : NULL;
    waitlist *wl = calloc(1, sizeof *wl);
    if (!wl || ds_store_map_put(&s->waiting, key, klen, (uint8_t *)wl, sizeof *wl) != 0) {
        free(wl);
        return NULL;
    }
    e = ds_store_map_get(&s->waiting, key, klen);
    wl->key = e->key; /* the entry's own copy: lives as long as the list */
    wl->klen = klen;
    return wl;
}

/* Takes w off its key's list; the last one out removes the list. */
static void unlink_key(ds_store_server *s, waiter *w) {
    waitlist *wl = w->wl;
    if (!wl) return;
    if (w->kprev) w->kprev->knext = w->knext;
    else wl->first = w->knext;
    if (w->knext) w->knext->kprev = w->kprev;
    w->wl = NULL;
    w->kprev = w->knext = NULL;
    if (!wl->first) ds_store_map_delete(&s->waiting, wl->key, wl->klen); /* frees wl */
}

static void push_ready(ds_store_server *s, waiter *w) {
    if (w->ready) return;
    w->ready = 1;
    w->rprev = NULL;
    w->rnext = s->ready;
    if (s->ready) s->ready->rprev = w;
    s->ready = w;
}

static void unlink_ready(ds_store_server *s, waiter *w) {
    if (!w->ready) return;
    if (w->rprev) w->rprev->rnext = w->rnext;
    else s->ready = w->rnext;
    if (w->rnext) w->rnext->rprev = w->rprev;
    w->rprev = w->rnext = NULL;
    w->ready = 0;
}

static waiter *waiter_new(request *q, int32_t timeout_ms) {
    waiter *w = calloc(1, sizeof *w);
    uint8_t *body = malloc(q->whole.n ? q->whole.n : 1);
    if (!w || !body) {
        free(w);
        free(body);
        return NULL;
    }
    memcpy(body, q->whole.p, q->whole.n);
    client *c = q->c;
    *w = (waiter){.c = c, .tagged = q->tagged, .tag = q->tag, .op = q->op, .body = body,
                  .blen = (uint32_t)q->whole.n, .deadline_ms = timeout_ms < 0 ? -1 : ds_now_ms() + timeout_ms};
    w->cnext = c->waiters;
    if (c->waiters) c->waiters->cprev = w;
    c->waiters = w;
    if (!w->tagged) c->blocked = 1;
    atomic_fetch_add(&q->s->nwaiting, 1);
    ds_store_server *s = q->s;
    if (w->deadline_ms >= 0 && (s->next_due_ms < 0 || w->deadline_ms < s->next_due_ms)) s->next_due_ms = w->deadline_ms;
    return w;
}

void ds_store_waiter_free(ds_store_server *s, waiter *w) {
    if (w->op == DS_STORE_OP_BARRIER) ds_store_barrier_left(s, w);
    unlink_key(s, w);
    unlink_ready(s, w);
    client *c = w->c;
    if (w->cprev) w->cprev->cnext = w->cnext;
    else c->waiters = w->cnext;
    if (w->cnext) w->cnext->cprev = w->cprev;
    if (!w->tagged) c->blocked = 0;
    atomic_fetch_sub(&s->nwaiting, 1);
    free(w->body);
    free(w);
}

int ds_store_wait_on(request *q, int32_t timeout_ms, const uint8_t *key, size_t klen) {
    if (!q->w && !(q->w = waiter_new(q, timeout_ms))) {
        snprintf(q->why, sizeof q->why, "out of memory for a waiting request");
        return REJECT;
    }
    waiter *w = q->w;
    if (w->deadline_ms >= 0 && ds_now_ms() >= w->deadline_ms) return ds_store_reply(q, DS_STORE_TIMEOUT, NULL, 0, NULL, 0);
    waitlist *wl = list_of(q->s, key, klen, 1);
    if (!wl) {
        snprintf(q->why, sizeof q->why, "out of memory for a waiting request");
        return REJECT;
    }
    w->wl = wl;
    w->kprev = NULL;
    w->knext = wl->first;
    if (wl->first) wl->first->kprev = w;
    wl->first = w;
    return BLOCKED;
}

void ds_store_key_set(ds_store_server *s, const uint8_t *key, size_t klen) {
    waitlist *wl = list_of(s, key, klen, 0);
    while (wl && wl->first) {
        waiter *w = wl->first;
        int last = w->knext == NULL;
        unlink_key(s, w); /* the last one frees wl */
        push_ready(s, w);
        if (last) break;
    }
}

/* Evaluates w again: answered (freed), or waiting on its next missing key. */
static void retry(ds_store_server *s, waiter *w) {
    client *c = w->c;
    unlink_key(s, w);
    unlink_ready(s, w);
    request q = {.s = s, .c = c, .body = {w->body, w->blen}, .whole = {w->body, w->blen},
                 .op = w->op, .tagged = w->tagged, .tag = w->tag, .w = w};
    int rc = ds_store_dispatch(&q);
    if (rc == BLOCKED) return;
    ds_store_waiter_free(s, w);
    if (rc == REJECT) ds_store_client_drop(s, c, q.why);
    ds_store_pump(s, c); /* sends the answer; an unblocked client's next requests go on */
}

void ds_store_run_ready(ds_store_server *s) {
    if (atomic_exchange(&s->changed, 0)) {
        /* The controller set a key (ds_store_server_set, another thread): every waiter
         * looks again. Rare: the controller sets a handful of keys per job. */
        for (int i = 0; i < s->nclients; i++)
            for (waiter *w = s->clients[i]->dead ? NULL : s->clients[i]->waiters; w; w = w->cnext) {
                unlink_key(s, w);
                push_ready(s, w);
            }
    }
    while (s->ready) retry(s, s->ready);
}

void ds_store_expire(ds_store_server *s, client *c, int64_t now, int64_t *next) {
    for (waiter *w = c->waiters; w; w = w->cnext) {
        if (w->ready || w->deadline_ms < 0) continue;
        if (now >= w->deadline_ms) {
            unlink_key(s, w);
            push_ready(s, w);
        } else if (*next < 0 || w->deadline_ms < *next) {
            *next = w->deadline_ms;
        }
    }
}

int ds_store_cancel(ds_store_server *s, client *c, uint32_t tag) {
    for (waiter *w = c->waiters; w; w = w->cnext)
        if (w->tagged && w->tag == tag) {
            ds_store_waiter_free(s, w);
            return 1;
        }
    return 0;
}

void ds_store_drop_waiters(ds_store_server *s, client *c) {
    while (c->waiters) ds_store_waiter_free(s, c->waiters);
}
