/* The only C++ in the project: a thin extern "C" shim over Gloo's options-style API
 * (gloo_shim.cc), with unbound buffers only (docs/comm.md: the legacy bound-buffer
 * algorithm classes pin SO_SNDBUF and make large ops crawl). No exception escapes:
 * every function catches and returns -1 with err. One ds_gloo is one Gloo context;
 * it must be used by one thread at a time. */
#ifndef DS_GLOO_SHIM_H
#define DS_GLOO_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ds_err.h"
#include "store_client.h"

typedef struct ds_gloo ds_gloo;

/* Element types of the reductions; BF16 and F16 are raw 16-bit payloads summed through
 * fp32 with one rounding to 16 bits per addition (kernels.h ds_half_add). */
typedef enum ds_gloo_type { DS_GLOO_F32, DS_GLOO_I32, DS_GLOO_BF16, DS_GLOO_F16 } ds_gloo_type;

/* Creates a TCP device bound to addr, then connects the full mesh through store, whose
 * keys are prefix + Gloo's own key names. timeout_ms bounds the rendezvous and every
 * later op. */
ds_gloo *ds_gloo_open(ds_store_client *store, const char *prefix, int rank, int world,
                      const char *addr, int timeout_ms, ds_err *err);
void ds_gloo_close(ds_gloo *g);

/* Sum over all ranks in place. */
int ds_gloo_allreduce(ds_gloo *g, void *buf, size_t count, ds_gloo_type t, uint32_t tag,
                      ds_err *err);
/* in: world * count; rank r ends with the sum of shard r in out (a ring of unbound
 * send/recv; in is used as the accumulator). */
int ds_gloo_reduce_scatter(ds_gloo *g, void *in, void *out, size_t count, ds_gloo_type t,
                           uint32_t tag, ds_err *err);
/* Raw bytes: in (bytes) lands at out + rank * bytes on every rank; in may equal that. */
int ds_gloo_allgather(ds_gloo *g, const void *in, void *out, size_t bytes, uint32_t tag,
                      ds_err *err);
int ds_gloo_broadcast(ds_gloo *g, void *buf, size_t bytes, int root, uint32_t tag,
                      ds_err *err);
int ds_gloo_barrier(ds_gloo *g, uint32_t tag, ds_err *err);

#ifdef __cplusplus
}
#endif

#endif
