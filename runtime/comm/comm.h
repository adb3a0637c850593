/* Collective communication among the ranks of a job: one interface over two engines,
 * Gloo (CPU ranks, TCP) and NCCL (GPU ranks), plus a trivial communicator for a world
 * of one that needs neither. docs/comm.md says how the rendezvous works and what each
 * backend does underneath.
 *
 * Rules the caller keeps (as with NCCL and MPI):
 *  - every rank issues the same collectives, with the same counts and dtypes, in the
 *    same order (the order of the calls that start them, sync or async);
 *  - buffers stay valid and untouched until the op completes (sync: the call returns;
 *    async: ds_comm_wait returns); each handle is waited exactly once;
 *  - one thread at a time calls into a communicator (ops run in issue order on the
 *    backend's own thread or stream, so a single issuing thread is what makes the
 *    order the same everywhere);
 *  - buffers are host memory for the self and Gloo backends, device memory for NCCL.
 *
 * Shapes: reduce-scatter and all-gather work on equal shards of `count` elements per
 * rank; the full buffer holds world_size * count elements and rank r's shard starts at
 * element r * count (runtime/zero/partition.h pads flat buffers so they split evenly).
 * In place is allowed where noted.
 *
 * Errors: -1 (or NULL) with err filled (err may be NULL), naming the rank, the host and
 * the op. After a transport failure (a peer died, a timeout) the communicator is broken:
 * every later op fails at once with the first error; close it. Results are
 * deterministic: for a fixed world size and backend, the same inputs give bit-identical
 * outputs on every rank and on every run. */
#ifndef DS_COMM_H
#define DS_COMM_H

#include <stddef.h>

#include "ds_context.h"
#include "ds_err.h"
#include "ds_dtype.h"

/* Host memory the Gloo backend keeps (category comm) once a reduce-scatter ran: the
 * receive ring of its reduce-scatter (gloo_shim.cc). The memory planner counts it. */
#define DS_COMM_GLOO_RING_BYTES ((size_t)4 << 20)

typedef struct ds_comm ds_comm;
typedef struct ds_comm_handle ds_comm_handle;

typedef enum ds_comm_backend {
    DS_COMM_AUTO = 0, /* world of one: SELF; else DS_COMM_BACKEND env ("gloo"|"nccl"), else GLOO */
    DS_COMM_SELF,
    DS_COMM_GLOO,
    DS_COMM_NCCL, /* only in builds with CUDA (DS_HAVE_CUDA) */
} ds_comm_backend;

typedef enum ds_comm_reduce {
    DS_COMM_SUM = 0,
    DS_COMM_AVG, /* the sum divided by world size (floating-point dtypes) */
} ds_comm_reduce;

/* Everything has a default; a zeroed struct (or NULL) means "defaults". */
typedef struct ds_comm_opts {
    ds_comm_backend backend;
    int timeout_ms;        /* rendezvous, and each op; <= 0: DS_COMM_TIMEOUT_MS env, else 120000 */
    const char *node_addr; /* address peers reach this rank at (Gloo binds it);
                              NULL: DS_NODE_ADDR env, else ctx->host */
} ds_comm_opts;

/* Joins the job's communicator: ctx gives rank, world size, attempt and the store (all
 * rendezvous keys live under "comm/<attempt>/<n>/", n counting this process's opens).
 * A world of one needs no store and returns the trivial communicator. A rendezvous that
 * times out names the ranks that never arrived. Opening Gloo ignores SIGPIPE for the
 * whole process (a dead peer must be an error, not a death). Collective: every rank
 * must call it. */
ds_comm *ds_comm_open(const ds_context *ctx, ds_err *err);
ds_comm *ds_comm_open_opts(const ds_context *ctx, const ds_comm_opts *opts, ds_err *err);
/* No op may be in flight (wait every handle first). NULL is allowed. */
void ds_comm_close(ds_comm *c);

/* 1 once a transport failure broke c (a peer died, an op timed out): a rank's error
 * after that is a consequence of another failure, which the failure record says. */
int ds_comm_is_broken(ds_comm *c);

int ds_comm_rank(const ds_comm *c);
int ds_comm_size(const ds_comm *c);
ds_comm_backend ds_comm_backend_of(const ds_comm *c);
const char *ds_comm_backend_name(ds_comm_backend b);

/* Asynchronous ops: start the op and return its handle at once (NULL with err when the
 * arguments are wrong or the communicator is broken; nothing was started then).
 * Reductions take fp32, bf16, fp16 (SUM, AVG) and int32 (SUM, wrapping); all-gather and
 * broadcast move any dtype as raw payload. bf16/fp16 sums are done in fp32 per addition
 * and rounded to 16 bits after each one (as NCCL does for 16-bit types), so the result
 * depends on the order, which is fixed per backend and world size and identical on
 * every rank; AVG then scales by 1/world (docs/comm.md). */

/* buf (count elements) becomes the element-wise reduction over all ranks. */
ds_comm_handle *ds_comm_iallreduce(ds_comm *c, void *buf, size_t count, ds_dtype dt,
                                   ds_comm_reduce op, ds_err *err);
/* in: world * count elements; out: count elements, this rank's shard of the reduction.
 * out may be in + rank * count (in place). in is scratch afterwards (Gloo accumulates in
 * it; do not rely on its contents with any backend). */
ds_comm_handle *ds_comm_ireduce_scatter(ds_comm *c, void *in, void *out, size_t count,
                                        ds_dtype dt, ds_comm_reduce op, ds_err *err);
/* in: count elements; out: world * count, rank r's in at out + r * count.
 * in may be out + rank * count (in place). */
ds_comm_handle *ds_comm_iallgather(ds_comm *c, const void *in, void *out, size_t count,
                                   ds_dtype dt, ds_err *err);
/* buf on root is copied into buf on every other rank. */
ds_comm_handle *ds_comm_ibroadcast(ds_comm *c, void *buf, size_t count, ds_dtype dt,
                                   int root, ds_err *err);
ds_comm_handle *ds_comm_ibarrier(ds_comm *c, ds_err *err);

/* Blocks until the op is done and frees the handle: 0, or -1 with the op's error. On a
 * sim rank (a host backend on device memory) it blocks nothing: the device's compute
 * stream waits for the op, so the buffers must be device memory read by work queued on
 * the device afterwards; a failure after it returned is the device's asynchronous error
 * (docs/devices.md, "Communication beside computation"). */
int ds_comm_wait(ds_comm_handle *h, ds_err *err);
/* 1 when the op is done (wait will not block), 0 when not yet. Never blocks. */
int ds_comm_done(ds_comm_handle *h);

/* Synchronous forms: start + wait. */
int ds_comm_allreduce(ds_comm *c, void *buf, size_t count, ds_dtype dt, ds_comm_reduce op,
                      ds_err *err);
int ds_comm_reduce_scatter(ds_comm *c, void *in, void *out, size_t count, ds_dtype dt,
                           ds_comm_reduce op, ds_err *err);
int ds_comm_allgather(ds_comm *c, const void *in, void *out, size_t count, ds_dtype dt,
                      ds_err *err);
int ds_comm_broadcast(ds_comm *c, void *buf, size_t count, ds_dtype dt, int root,
                      ds_err *err);
int ds_comm_barrier(ds_comm *c, ds_err *err);

/* Seconds this process's callers have spent blocked in ds_comm_wait and the synchronous
 * forms, since it started (every communicator together): the communication time that
 * overlap did not hide. ds.monitor reports it per step. */
double ds_comm_wait_seconds(void);

#endif
