/* A sub-allocator over one range of device memory, for a device that reserves its memory
 * once and hands out pieces of it (the simulator's region; a CUDA backend could run it
 * over one large cudaMalloc). It deals in offsets [0, size), never touches the memory,
 * and is not thread-safe: the device holds its own lock around every call.
 *
 * Best fit (ties to the lowest address, which keeps the used part of the range compact),
 * every block aligned to the pool's alignment, neighbouring free blocks coalesced.
 * A free is two steps, for stream-ordered reuse as cudaFreeAsync does it:
 *   retire   the host freed the block; work already queued may still use it, so it is
 *            not handed out again (it no longer counts as in use);
 *   reclaim  that work has run: the block is free and coalesces with its neighbours. */
#ifndef DS_DEVICE_POOL_H
#define DS_DEVICE_POOL_H

#include <stddef.h>

typedef struct ds_pool ds_pool;

typedef enum ds_pool_state { DS_POOL_FREE, DS_POOL_LIVE, DS_POOL_RETIRED } ds_pool_state;

typedef struct ds_pool_block {
    size_t off, size; /* size: what the block spans (aligned, guard included) */
    size_t asked;     /* bytes the allocation asked for (LIVE and RETIRED blocks) */
    ds_pool_state state;
} ds_pool_block;

typedef struct ds_pool_stats {
    size_t size;          /* the range */
    size_t in_use;        /* bytes asked by the live blocks */
    size_t live;          /* what the live blocks span (in_use rounded up) */
    size_t retired;       /* freed by the host, waiting for queued work */
    size_t free;          /* in free blocks: what could still be handed out */
    size_t largest_free;  /* the largest single allocation that would succeed now */
    size_t extent;        /* end of the highest live or retired block */
    size_t live_blocks, retired_blocks;
} ds_pool_stats;

/* size and align > 0; align a power of two. guard: bytes every block spans past what it
 * asked for (a sanitizer's redzone; 0 normally). NULL when out of host memory. */
ds_pool *ds_pool_new(size_t size, size_t align, size_t guard);
void ds_pool_destroy(ds_pool *p);
/* A live block of at least bytes (0 counts as 1); 0 and its offset, or -1 when no free
 * block is large enough (nothing changes then). span, when not NULL, gets what it spans. */
int ds_pool_alloc(ds_pool *p, size_t bytes, size_t *off, size_t *span);
/* The live block starting at off -> retired; -1 when off starts no live block (a double
 * free or a pointer into a block). asked, when not NULL, gets the block's asked bytes. */
int ds_pool_retire(ds_pool *p, size_t off, size_t *asked);
/* The retired block starting at off -> free; -1 when off starts no retired block. */
int ds_pool_reclaim(ds_pool *p, size_t off);
/* The block holding off (off < size): 0 and *out; -1 when off is past the range. */
int ds_pool_find(const ds_pool *p, size_t off, ds_pool_block *out);
void ds_pool_stats_get(const ds_pool *p, ds_pool_stats *out);

#endif
