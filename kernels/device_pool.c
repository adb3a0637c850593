/* The blocks are one array sorted by offset that tiles the range: a block's neighbours are
 * its array neighbours, lookups are binary searches, and a split or a merge moves the
 * tail of the array. A device holds hundreds to a few thousand blocks, so the moves and
 * the best-fit scan cost microseconds, far below a kernel launch. */
#include "device_pool.h"

#include <stdlib.h>
#include <string.h>

struct ds_pool {
    size_t size, align, guard;
    ds_pool_block *b;
    size_t n, cap;
    size_t in_use, live, retired; /* running totals of the stats */
    size_t live_blocks, retired_blocks;
};

ds_pool *ds_pool_new(size_t size, size_t align, size_t guard) {
    if (!size || !align || (align & (align - 1))) return NULL;
    ds_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->size = size;
    p->align = align;
    p->guard = guard;
    p->cap = 64;
    p->b = malloc(p->cap * sizeof *p->b);
    if (!p->b) return free(p), NULL;
    p->b[0] = (ds_pool_block){0, size, 0, DS_POOL_FREE};
    p->n = 1;
    return p;
}

void ds_pool_destroy(ds_pool *p) {
    if (!p) return;
    free(p->b);
    free(p);
}

/* Index of the block holding off (off < size). */
static size_t block_at(const ds_pool *p, size_t off) {
    size_t lo = 0, hi = p->n;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->b[mid].off <= off) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Opens a slot at index i (the blocks from i on move up one). */
static int insert_slot(ds_pool *p, size_t i) {
    if (p->n == p->cap) {
        ds_pool_block *nb = realloc(p->b, 2 * p->cap * sizeof *nb);
        if (!nb) return -1;
        p->b = nb;
        p->cap *= 2;
    }
    memmove(p->b + i + 1, p->b + i, (p->n - i) * sizeof *p->b);
    p->n++;
    return 0;
}

static void remove_slot(ds_pool *p, size_t i) {
    memmove(p->b + i, p->b + i + 1, (p->n - i - 1) * sizeof *p->b);
    p->n--;
}

int ds_pool_alloc(ds_pool *p, size_t bytes, size_t *off, size_t *span) {
    size_t want = bytes ? bytes : 1;
    if (want > p->size || p->size - want < p->guard) return -1;
    want += p->guard;
    want = (want + p->align - 1) & ~(p->align - 1);
    size_t best = p->n;
    for (size_t i = 0; i < p->n; i++) {
        const ds_pool_block *b = &p->b[i];
        if (b->state == DS_POOL_FREE && b->size >= want &&
            (best == p->n || b->size < p->b[best].size))
            best = i;
    }
    if (best == p->n) return -1;
    if (p->b[best].size > want) { /* split: the rest stays free after the new block */
        if (insert_slot(p, best + 1) != 0) return -1;
        ds_pool_block *b = &p->b[best];
        p->b[best + 1] = (ds_pool_block){b->off + want, b->size - want, 0, DS_POOL_FREE};
        b->size = want;
    }
    ds_pool_block *b = &p->b[best];
    b->state = DS_POOL_LIVE;
    b->asked = bytes;
    p->in_use += bytes;
    p->live += b->size;
    p->live_blocks++;
    *off = b->off;
    if (span) *span = b->size;
    return 0;
}

/* The index of the block starting exactly at off in state s, or p->n. */
static size_t block_starting(const ds_pool *p, size_t off, ds_pool_state s) {
    if (off >= p->size) return p->n;
    size_t i = block_at(p, off);
    return p->b[i].off == off && p->b[i].state == s ? i : p->n;
}

int ds_pool_retire(ds_pool *p, size_t off, size_t *asked) {
    size_t i = block_starting(p, off, DS_POOL_LIVE);
    if (i == p->n) return -1;
    ds_pool_block *b = &p->b[i];
    b->state = DS_POOL_RETIRED;
    p->in_use -= b->asked;
    p->live -= b->size;
    p->live_blocks--;
    p->retired += b->size;
    p->retired_blocks++;
    if (asked) *asked = b->asked;
    return 0;
}

int ds_pool_reclaim(ds_pool *p, size_t off) {
    size_t i = block_starting(p, off, DS_POOL_RETIRED);
    if (i == p->n) return -1;
    p->retired -= p->b[i].size;
    p->retired_blocks--;
    p->b[i].state = DS_POOL_FREE;
    p->b[i].asked = 0;
    if (i + 1 < p->n && p->b[i + 1].state == DS_POOL_FREE) {
        p->b[i].size += p->b[i + 1].size;
        remove_slot(p, i + 1);
    }
    if (i > 0 && p->b[i - 1].state == DS_POOL_FREE) {
        p->b[i - 1].size += p->b[i].size;
        remove_slot(p, i);
    }
    return 0;
}

int ds_pool_find(const ds_pool *p, size_t off, ds_pool_block *out) {
    if (off >= p->size) return -1;
    *out = p->b[block_at(p, off)];
    return 0;
}

void ds_pool_stats_get(const ds_pool *p, ds_pool_stats *out) {
    memset(out, 0, sizeof *out);
    out->size = p->size;
    out->in_use = p->in_use;
    out->live = p->live;
    out->retired = p->retired;
    out->free = p->size - p->live - p->retired;
    out->live_blocks = p->live_blocks;
    out->retired_blocks = p->retired_blocks;
    for (size_t i = 0; i < p->n; i++) {
        const ds_pool_block *b = &p->b[i];
        if (b->state == DS_POOL_FREE && b->size > out->largest_free) out->largest_free = b->size;
        if (b->state != DS_POOL_FREE) out->extent = b->off + b->size;
    }
}
