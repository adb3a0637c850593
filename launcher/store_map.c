/* A chained hash table that doubles its buckets when the entries outnumber them, so a
 * lookup stays O(1) for the thousands of keys a large job's rendezvous writes. */
#include "store_map.h"

#include <stdlib.h>
#include <string.h>

#define INITIAL_BUCKETS 256

static uint64_t hash_key(const void *k, size_t n) {
    const uint8_t *p = k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static ds_store_entry **slot_of(const ds_store_map *m, const void *key, size_t klen, uint64_t h) {
    ds_store_entry **e = &m->buckets[h & (m->nbuckets - 1)];
    while (*e && !((*e)->hash == h && (*e)->klen == klen && memcmp((*e)->key, key, klen) == 0))
        e = &(*e)->next;
    return e;
}

int ds_store_map_init(ds_store_map *m) {
    m->nentries = 0;
    m->nbuckets = INITIAL_BUCKETS;
    m->buckets = calloc(m->nbuckets, sizeof *m->buckets);
    return m->buckets ? 0 : -1;
}

void ds_store_map_free(ds_store_map *m) {
    for (size_t i = 0; i < m->nbuckets && m->buckets; i++) {
        for (ds_store_entry *e = m->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e->val);
            free(e);
        }
    }
    free(m->buckets);
    m->buckets = NULL;
    m->nbuckets = m->nentries = 0;
}

ds_store_entry *ds_store_map_get(const ds_store_map *m, const void *key, size_t klen) {
    return *slot_of(m, key, klen, hash_key(key, klen));
}

static int grow(ds_store_map *m) {
    size_t n = m->nbuckets * 2;
    ds_store_entry **b = calloc(n, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < m->nbuckets; i++) {
        for (ds_store_entry *e = m->buckets[i], *next; e; e = next) {
            next = e->next;
            e->next = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    free(m->buckets);
    m->buckets = b;
    m->nbuckets = n;
    return 0;
}

int ds_store_map_put(ds_store_map *m, const void *key, size_t klen, uint8_t *val, size_t vlen) {
    uint64_t h = hash_key(key, klen);
    ds_store_entry **slot = slot_of(m, key, klen, h);
    if (*slot) {
        free((*slot)->val);
        (*slot)->val = val;
        (*slot)->vlen = vlen;
        return 0;
    }
    ds_store_entry *e = malloc(sizeof *e + klen + 1);
    if (!e) return -1;
    e->next = NULL;
    e->hash = h;
    e->klen = klen;
    memcpy(e->key, key, klen);
    e->key[klen] = '\0';
    e->val = val;
    e->vlen = vlen;
    *slot = e;
    m->nentries++;
    if (m->nentries > m->nbuckets) grow(m); /* on failure the chains just get longer */
    return 0;
}

int ds_store_map_delete(ds_store_map *m, const void *key, size_t klen) {
    ds_store_entry **slot = slot_of(m, key, klen, hash_key(key, klen));
    if (!*slot) return 0;
    ds_store_entry *e = *slot;
    *slot = e->next;
    free(e->val);
    free(e);
    m->nentries--;
    return 1;
}
