/* The simulated device's parts (kernels/sim), shared by its files:
 *   sim_region.c        the memory: one memfd mapped twice (a no-access view whose
 *                       addresses the host holds, a read/write alias the streams use),
 *                       its size from DS_SIM_MEMORY, checks of device pointers
 *   sim_stream.c        streams (a thread and a FIFO of work each), events, the sticky
 *                       asynchronous error, DS_SIM_DELAY's random waits
 *   device_sim.c        the device's operations (device.h) on those
 *   kernel_table_sim.c  the kernel table: each entry queues the CPU kernel on the
 *                       compute stream with its pointers moved to the alias */
#ifndef DS_SIM_H
#define DS_SIM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "device_pool.h"

typedef struct sim_dev sim_dev;
typedef struct sim_stream sim_stream;
typedef struct sim_work sim_work;

/* One piece of queued work; the stream frees it after running it. */
struct sim_work {
    sim_work *next;
    /* Runs on the stream's thread; -1 with err makes err the device's asynchronous error. */
    int (*run)(sim_work *w, sim_stream *s, ds_err *err);
    /* Runs even after an asynchronous error: frees and event waits keep the streams'
     * order and the memory's bookkeeping; kernels and copies are skipped instead. */
    int always;
};

struct sim_stream {
    sim_dev *dev;
    int index; /* 0: the compute stream */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* work queued, work done */
    sim_work *head, *tail;
    uint64_t queued, done; /* work items queued and run so far; done <= queued */
    int stop, joined;
    uint64_t rng;    /* DS_SIM_DELAY's generator, seeded per stream */
    int omp_threads; /* the OpenMP thread count last set on this thread */
    sim_stream *next; /* every stream of the device, newest first */
};

/* An event is a point in one stream: reached once the stream has run seq items. */
typedef struct sim_event {
    sim_stream *s; /* NULL: never recorded (reached) */
    uint64_t seq;
} sim_event;

struct sim_dev {
    ds_device dev; /* what the engine holds; dev.impl points back here */
    /* memory */
    int fd;
    char *view;  /* the addresses handed out: PROT_NONE, a host dereference faults */
    char *alias; /* the same pages, readable and writable: the streams' access */
    size_t size;
    size_t touched;  /* offsets at and above this were never handed out: still zero */
    size_t poisoned; /* ASan: the alias is poisoned below this at most */
    size_t redzone;  /* ASan: poisoned bytes after every allocation */
    pthread_mutex_t lock; /* the pool, touched, poisoned, the stream list, the error */
    ds_pool *pool;
    /* streams */
    sim_stream *compute;
    sim_stream *streams; /* all, newest first; freed streams stay (events may name them) */
    int nstreams;
    unsigned delay_us; /* DS_SIM_DELAY: at most this long before each work item */
    uint64_t seed;     /* DS_SIM_SEED */
    /* the first asynchronous error, sticky */
    atomic_int failed;
    char error[1024];
};

/* The open sim device, for the kernel table's entries (which take no device). */
sim_dev *sim_current(void);
extern const ds_kernel_table ds_sim_kernels;

/* ---- sim_region.c ---------------------------------------------------------------- */
/* Reads DS_SIM_MEMORY (default 16 GiB): 0 and *bytes, or -1 with err. */
int sim_memory_size(size_t *bytes, ds_err *err);
/* Maps the region (g->size bytes): 0, or -1 with err. */
int sim_region_map(sim_dev *g, ds_err *err);
void sim_region_unmap(sim_dev *g);
/* 1 when p lies in the region's no-access view. */
int sim_in_region(const sim_dev *g, const void *p);
/* The alias of the device range [p, p + bytes), which must lie in one allocation that is
 * live (allocated and not freed); bytes 0: p may also be its end. NULL with why (a
 * sentence about p, for the caller's message) otherwise. */
void *sim_translate(sim_dev *g, const void *p, size_t bytes, char *why, size_t why_len);
/* Fills the freed range with 0xff bytes (NaN as floats), on the pages that hold data:
 * pages never written stay unallocated (they read as zeros, and touching them would
 * cost memory and time for nothing). */
void sim_fill_freed(sim_dev *g, size_t off, size_t bytes);
/* ASan's view of the alias (no-ops in builds without it): allocations addressable,
 * redzones and free blocks poisoned, so a kernel that overruns its buffer or reads freed
 * memory through the alias is reported. Call with g->lock held. */
void sim_asan_allocated(sim_dev *g, size_t off, size_t asked, size_t span);
void sim_asan_freed(sim_dev *g, size_t off, size_t span);
void sim_asan_forget(sim_dev *g); /* before unmapping: the addresses may be reused */

/* ---- sim_stream.c ---------------------------------------------------------------- */
sim_stream *sim_stream_start(sim_dev *g, ds_err *err);
/* Runs what is queued, then ends the thread; the struct stays until sim_streams_free. */
void sim_stream_stop(sim_stream *s);
void sim_streams_free(sim_dev *g);
/* Queues w at the end of s (NULL: the compute stream); the item's sequence number. */
uint64_t sim_enqueue(sim_stream *s, sim_work *w);
/* A work item that only reports msg as the asynchronous error when the stream reaches it:
 * an invalid launch fails in its place in the stream order. */
void sim_enqueue_error(sim_stream *s, const char *msg);
/* How many items s has been given so far: the point a wait for "all queued" targets. */
uint64_t sim_queued(sim_stream *s);
/* The host waits until s has run seq items. */
void sim_wait_seq(sim_stream *s, uint64_t seq);
/* The host waits until every stream has run what was queued on it before the call. */
void sim_wait_all(sim_dev *g);
/* The stream running the calling thread's work, or NULL on a host thread. */
sim_stream *sim_stream_self(void);
/* Records msg as the asynchronous error unless one is already recorded (first wins). */
void sim_fail(sim_dev *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0, or -1 with the sticky error in err. */
int sim_check_failed(sim_dev *g, ds_err *err);
/* The streams' order for events (device.h's event ops). */
void sim_event_record(sim_event *e, sim_stream *s);
void sim_stream_wait_event(sim_stream *s, const sim_event *e);
int sim_event_reached(const sim_event *e);
void sim_event_wait(const sim_event *e);

#endif
