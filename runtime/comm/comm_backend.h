/* Inside a communicator: what comm.c (the engine-independent part: validation, the
 * issue queue, the communication thread, handles) asks of a backend (self, Gloo, NCCL).
 * Not for users of comm.h. */
#ifndef DS_COMM_BACKEND_H
#define DS_COMM_BACKEND_H

#include <stdint.h>

#include "comm.h"
#include "device.h"
#include "store_client.h"

typedef enum ds_comm_kind {
    DS_COMM_OP_ALLREDUCE,
    DS_COMM_OP_REDUCE_SCATTER,
    DS_COMM_OP_ALLGATHER,
    DS_COMM_OP_BROADCAST,
    DS_COMM_OP_BARRIER,
} ds_comm_kind;

/* One op, from its start to its wait. Fields above `done` are set before the op is
 * queued and read-only afterwards. */
struct ds_comm_handle {
    ds_comm *comm;
    ds_comm_kind kind;
    void *in, *out; /* allreduce, broadcast: in == out == the buffer */
    size_t count;   /* elements: whole buffer, or per-rank shard for RS / AG */
    ds_dtype dtype;
    ds_comm_reduce op;
    int root;
    uint32_t tag; /* sequence number of the op in this communicator: equal on every rank */
    void *backend_data; /* NCCL: the completion event */
    struct ds_comm_handle *next;
    int ran;      /* the backend saw it (zero-size ops are skipped) */
    int done, rc; /* under the communicator's lock when threaded */
    ds_err err;
};

typedef struct ds_comm_vtable {
    ds_comm_backend backend;
    /* 1: run() blocks until the op is done and is called on the communication thread;
     * 0: run() only enqueues (NCCL stream) and finish() waits, on the caller's thread. */
    int threaded;
    /* 1: the backend divides by world size itself for DS_COMM_AVG. */
    int native_avg;
    int (*run)(void *be, ds_comm_handle *h, ds_err *err);
    int (*finish)(void *be, ds_comm_handle *h, ds_err *err); /* NULL when run completes */
    int (*poll)(void *be, ds_comm_handle *h); /* with finish: 1 when finish won't block */
    /* Device backends may give ds_comm_wait this instead of finish (NULL: finish): the
     * device's compute stream waits for the op, the host does not; a later failure of the
     * op is the device's asynchronous error. The synchronous forms keep finish. */
    int (*order)(void *be, ds_comm_handle *h, ds_err *err);
    void (*close)(void *be);
} ds_comm_vtable;

/* What a backend's open needs to know. */
typedef struct ds_comm_join {
    int rank, world;
    ds_store_client *store;
    ds_store_client *watch_store; /* another thread's client of the store, or NULL */
    const char *prefix; /* "comm/<attempt>/<n>/": every store key of this open starts so */
    const char *node_addr;
    int timeout_ms;
} ds_comm_join;

/* What a communicator's ranks tell each other through the store (comm_peers.c), for a
 * transport that cannot say a peer is gone (NCCL). Keys under the open's prefix. */
typedef struct ds_comm_peers {
    ds_store_client *store; /* NULL: nothing is shared, nothing is ever reported */
    int rank;
    char host[64];
    char prefix[128];
    char failed_key[160]; /* "<prefix>failed": the first failing rank's message */
} ds_comm_peers;
void ds_comm_peers_init(ds_comm_peers *p, const ds_comm_join *j);
/* Rank 0 fills val with make() and stores it at "<prefix><name>"; the other ranks get it
 * (len bytes), or fail at once, naming rank 0, when rank 0 published a failure (its own
 * make() failing included) instead of waiting out timeout_ms. */
int ds_comm_peers_share(ds_comm_peers *p, const char *name, void *val, size_t len,
                        int (*make)(void *val, size_t len, ds_err *err), int timeout_ms,
                        ds_err *err);
/* Makes "rank R (host): why" the communicator's failure unless a rank's is there. */
void ds_comm_peers_publish(ds_comm_peers *p, const char *why);
/* 1 with err "<what>: stopped: peer rank R (host): ..." when a rank published its
 * failure; 0 otherwise (a store that cannot answer counts as no news). */
int ds_comm_peers_failed(ds_comm_peers *p, const char *what, ds_err *err);

/* DS_COMM_AVG after a sum, for backends without a native average: fp32 divided exactly,
 * 16-bit as round16(x * (1/world)), exact for a power-of-two world unless it underflows.
 * out must be host-addressable (on a device: inside a host function on its stream). */
void ds_comm_average(void *out, size_t count, ds_dtype dt, int world);

/* A host backend (self, Gloo) made to work on the rank's device memory: its ops run in
 * order on a stream of the device, after the work queued on the compute stream, on
 * device memory made addressable there (ds_device_ops.launch_host). Takes over inner;
 * NULL with err (inner closed) when the device cannot. */
void *ds_comm_on_device(const ds_comm_vtable *inner_vt, void *inner, int world,
                        const ds_comm_vtable **vt, ds_err *err);

/* Each returns the backend's state (passed back as `be`) and its vtable, or NULL. */
void *ds_comm_self_open(const ds_comm_vtable **vt, ds_err *err);
/* A world of one on a device that runs no host functions (cuda): its copies are the
 * device's, queued on its compute stream in order with the kernels. */
void *ds_comm_self_device_open(ds_device *d, const ds_comm_vtable **vt, ds_err *err);
void *ds_comm_gloo_open(const ds_comm_join *j, const ds_comm_vtable **vt, ds_err *err);
/* The NCCL backend (nccl/comm_nccl.c), part of the CUDA backend: linked into the
 * programs that carry it, found by dsrun in the module its cuda device was loaded from. */
void *ds_comm_nccl_open(const ds_comm_join *j, const ds_comm_vtable **vt, ds_err *err);

#endif
