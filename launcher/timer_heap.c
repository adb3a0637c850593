/* timer_heap.h: a binary heap in an array, the earliest at 0. */
#include "timer_heap.h"

#include <stdlib.h>

int ds_timer_heap_push(ds_timer_heap *h, ds_timer t) {
    if (h->n == h->cap) {
        int cap = h->cap ? 2 * h->cap : 64;
        ds_timer *grown = realloc(h->t, (size_t)cap * sizeof *grown);
        if (!grown) return -1;
        h->t = grown;
        h->cap = cap;
    }
    int k = h->n++;
    for (; k > 0 && h->t[(k - 1) / 2].at > t.at; k = (k - 1) / 2) h->t[k] = h->t[(k - 1) / 2];
    h->t[k] = t;
    return 0;
}

const ds_timer *ds_timer_heap_top(const ds_timer_heap *h) { return h->n ? &h->t[0] : NULL; }

ds_timer ds_timer_heap_pop(ds_timer_heap *h) {
    ds_timer top = h->t[0], last = h->t[--h->n];
    int k = 0;
    for (;;) {
        int c = 2 * k + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && h->t[c + 1].at < h->t[c].at) c++;
        if (h->t[c].at >= last.at) break;
        h->t[k] = h->t[c];
        k = c;
    }
    if (h->n) h->t[k] = last;
    return top;
}

void ds_timer_heap_free(ds_timer_heap *h) {
    free(h->t);
    *h = (ds_timer_heap){0};
}
