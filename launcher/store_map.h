/* The rendezvous store's key/value table: byte-string keys to malloc'd byte values. Not
 * thread-safe; the store server calls it under its lock. */
#ifndef DS_STORE_MAP_H
#define DS_STORE_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ds_store_entry {
    struct ds_store_entry *next;
    uint64_t hash;
    size_t klen, vlen;
    uint8_t *val;
    char key[]; /* klen bytes + NUL, so a key can be printed */
} ds_store_entry;

typedef struct ds_store_map {
    ds_store_entry **buckets; /* a power of two of them, chained */
    size_t nbuckets, nentries;
} ds_store_map;

/* 0, or -1 when out of memory. */
int ds_store_map_init(ds_store_map *m);
void ds_store_map_free(ds_store_map *m);

ds_store_entry *ds_store_map_get(const ds_store_map *m, const void *key, size_t klen);
/* Sets key to val (malloc'd, vlen bytes), replacing any value. Takes ownership of val on
 * success; -1 when out of memory, val still the caller's. */
int ds_store_map_put(ds_store_map *m, const void *key, size_t klen, uint8_t *val, size_t vlen);
/* 1 if the key was there, 0 if not. */
int ds_store_map_delete(ds_store_map *m, const void *key, size_t klen);

#endif
