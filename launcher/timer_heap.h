/* A min-heap of timers by time, each for a node (the controller loop's node set:
 * openings' deadlines, keepalives, alarms; node_set.c). A timer the owner has since
 * changed or dropped stays in the heap: the owner checks the one on top and pops it when
 * it no longer counts, so changing a timer costs a push, never a search. */
#ifndef DS_TIMER_HEAP_H
#define DS_TIMER_HEAP_H

typedef struct ds_timer {
    long long at; /* (monotonic ms) */
    int node, kind;
} ds_timer;

typedef struct ds_timer_heap {
    ds_timer *t;
    int n, cap;
} ds_timer_heap;

/* -1 when out of memory. */
int ds_timer_heap_push(ds_timer_heap *h, ds_timer t);
/* The earliest timer, NULL when none. */
const ds_timer *ds_timer_heap_top(const ds_timer_heap *h);
/* Takes the earliest timer off (h must not be empty) and returns it. */
ds_timer ds_timer_heap_pop(ds_timer_heap *h);
void ds_timer_heap_free(ds_timer_heap *h);

#endif
