/* The simulator's memory: one memfd, sparse (pages exist once touched), mapped twice.
 * The host is handed addresses in a PROT_NONE view, so a host dereference of a device
 * pointer faults at once, as it would on a GPU; the streams' threads reach the same
 * pages through a read/write alias at another address. Every device pointer a launch
 * names is checked against the allocator: inside the region, in a live allocation, and
 * (where the kernel's extent is known) not running past its end.
 *
 * AddressSanitizer: mmap'd memory is addressable to ASan and unknown to its allocator,
 * so by itself ASan would neither complain about the alias nor catch a kernel that
 * overruns a device buffer. The region therefore keeps its own ASan state: allocations
 * addressable, a redzone after each and freed blocks poisoned, so the instrumented CPU
 * kernels report such accesses like heap overflows or uses after free. The no-access
 * view needs nothing: its shadow says addressable, and the load itself faults. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sim.h"

#if defined(__SANITIZE_ADDRESS__)
#define SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SIM_ASAN 1
#endif
#endif
#ifdef SIM_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define SIM_DEFAULT_MEMORY ((size_t)16 << 30)

int sim_memory_size(size_t *bytes, ds_err *err) {
    const char *s = getenv("DS_SIM_MEMORY");
    if (!s || !*s) return *bytes = SIM_DEFAULT_MEMORY, 0;
    static const struct { const char *suffix; unsigned shift; } units[] = {
        {"", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    int unit = -1;
    for (int i = 0; i < 4 && end != s && errno == 0 && *s != '-'; i++)
        if (!strcasecmp(end, units[i].suffix)) unit = i;
    if (unit < 0 || v == 0)
        return ds_err_set(err, "DS_SIM_MEMORY='%s': expected a positive size in bytes, "
                               "optionally with KiB, MiB or GiB (e.g. 16GiB)", s);
    unsigned shift = units[unit].shift;
    if (v > (SIZE_MAX >> shift) >> 1) /* keep room to round up and to add redzones */
        return ds_err_set(err, "DS_SIM_MEMORY='%s': too large", s);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *bytes = (((size_t)v << shift) + page - 1) / page * page;
    return 0;
}

int sim_region_map(sim_dev *g, ds_err *err) {
    g->fd = memfd_create("ds-sim-device", MFD_CLOEXEC);
    if (g->fd < 0) return ds_err_errno(err, errno, "device sim: memfd_create");
    if (ftruncate(g->fd, (off_t)g->size) != 0) {
        ds_err_errno(err, errno, "device sim: sizing the memory to %zu bytes (DS_SIM_MEMORY)",
                     g->size);
        return close(g->fd), g->fd = -1, -1;
    }
    /* MAP_NORESERVE: pages count against memory when touched, as on a GPU they do not
     * count at all until allocated */
    g->view = mmap(NULL, g->size, PROT_NONE, MAP_SHARED | MAP_NORESERVE, g->fd, 0);
    g->alias = mmap(NULL, g->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, g->fd, 0);
    if (g->view == MAP_FAILED || g->alias == MAP_FAILED) {
        ds_err_errno(err, errno, "device sim: mapping %zu bytes twice (DS_SIM_MEMORY)", g->size);
        if (g->view != MAP_FAILED) munmap(g->view, g->size);
        if (g->alias != MAP_FAILED) munmap(g->alias, g->size);
        g->view = g->alias = NULL;
        return close(g->fd), g->fd = -1, -1;
    }
    /* A forked child has no stream threads to use the device with, and must not write
     * into the parent's device memory: the alias stays in the parent. */
    madvise(g->alias, g->size, MADV_DONTFORK);
#ifdef SIM_ASAN
    g->redzone = 256;
#endif
    return 0;
}

void sim_region_unmap(sim_dev *g) {
    if (g->view) munmap(g->view, g->size);
    if (g->alias) munmap(g->alias, g->size);
    if (g->fd >= 0) close(g->fd);
    g->view = g->alias = NULL;
    g->fd = -1;
}

int sim_in_region(const sim_dev *g, const void *p) {
    uintptr_t a = (uintptr_t)p, lo = (uintptr_t)g->view;
    return a >= lo && a - lo < g->size;
}

void *sim_translate(sim_dev *g, const void *p, size_t bytes, char *why, size_t why_len) {
    if (!sim_in_region(g, p)) {
        snprintf(why, why_len, "%p is not device memory (a host pointer? copy it with from_host)",
                 p);
        return NULL;
    }
    size_t off = (size_t)((const char *)p - g->view);
    ds_pool_block b, prev;
    pthread_mutex_lock(&g->lock);
    ds_pool_find(g->pool, off, &b);
    /* a zero-length range may end an allocation: p is then the next block's start */
    if (b.state != DS_POOL_LIVE && !bytes && off > 0 &&
        ds_pool_find(g->pool, off - 1, &prev) == 0 && prev.state == DS_POOL_LIVE &&
        prev.off + prev.asked == off)
        b = prev;
    pthread_mutex_unlock(&g->lock);
    if (b.state == DS_POOL_FREE) {
        snprintf(why, why_len, "%p points into free device memory (never allocated, or freed)", p);
        return NULL;
    }
    if (b.state == DS_POOL_RETIRED) {
        snprintf(why, why_len, "%p points into device memory freed before this call", p);
        return NULL;
    }
    if (bytes > b.asked || off - b.off > b.asked - bytes) {
        snprintf(why, why_len, "[%p, +%zu bytes) runs past the end of its allocation "
                 "(%zu bytes at %p)", p, bytes, b.asked, (void *)(g->view + b.off));
        return NULL;
    }
    return g->alias + off;
}

void sim_fill_freed(sim_dev *g, size_t off, size_t bytes) {
    enum { CHUNK = 256 }; /* pages asked about per mincore call */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), end = off + bytes;
    unsigned char resident[CHUNK];
    for (size_t p0 = off / page * page; p0 < end; p0 += CHUNK * page) {
        size_t span = end - p0 < CHUNK * page ? end - p0 : CHUNK * page;
        if (mincore(g->alias + p0, span, resident) != 0) { /* cannot tell: fill it all */
            memset(resident, 1, sizeof resident);
        }
        for (size_t i = 0; i * page < span; i++) {
            if (!(resident[i] & 1)) continue;
            size_t lo = p0 + i * page, hi = lo + page;
            lo = lo < off ? off : lo;
            hi = hi > end ? end : hi;
            memset(g->alias + lo, 0xff, hi - lo);
        }
    }
}

#ifdef SIM_ASAN
void sim_asan_allocated(sim_dev *g, size_t off, size_t asked, size_t span) {
    ASAN_UNPOISON_MEMORY_REGION(g->alias + off, asked);
    ASAN_POISON_MEMORY_REGION(g->alias + off + asked, span - asked);
    if (off + span > g->poisoned) g->poisoned = off + span;
}

void sim_asan_freed(sim_dev *g, size_t off, size_t span) {
    ASAN_POISON_MEMORY_REGION(g->alias + off, span);
}

void sim_asan_forget(sim_dev *g) {
    ASAN_UNPOISON_MEMORY_REGION(g->alias, g->poisoned);
    g->poisoned = 0;
}
#else
void sim_asan_allocated(sim_dev *g, size_t off, size_t asked, size_t span) {
    (void)g, (void)off, (void)asked, (void)span;
}
void sim_asan_freed(sim_dev *g, size_t off, size_t span) { (void)g, (void)off, (void)span; }
void sim_asan_forget(sim_dev *g) { (void)g; }
#endif
