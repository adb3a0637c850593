/* Client of the rendezvous key-value store served by the controller (like torchrun's
 * c10d store). Blocking calls with timeouts; one connection per client; not thread-safe
 * (use one client per thread). Keys are namespaced by attempt by the caller's prefix.
 *
 * CONTRACT for the parts that use it (agent, worker, comm, Lua bindings). The wire
 * protocol and the server live beside it (store_proto.h, launcher's store server). */
#ifndef DS_STORE_CLIENT_H
#define DS_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"

typedef struct ds_store_client ds_store_client;

/* Connects to host:port and presents the job token. timeout_ms bounds connect + auth. */
ds_store_client *ds_store_connect(const char *host, int port, const char *token,
                                  int timeout_ms, ds_err *err);
void ds_store_close(ds_store_client *c);

int ds_store_set(ds_store_client *c, const char *key, const void *val, size_t len, ds_err *err);
/* Blocks until key exists or timeout_ms passes (error naming the key). *val is malloc'd. */
int ds_store_get(ds_store_client *c, const char *key, void **val, size_t *len,
                 int timeout_ms, ds_err *err);
/* Atomically adds delta to the integer at key (missing = 0); *result gets the new value. */
int ds_store_add(ds_store_client *c, const char *key, int64_t delta, int64_t *result, ds_err *err);
/* Blocks until all keys exist or timeout. */
int ds_store_wait(ds_store_client *c, const char *const *keys, int nkeys, int timeout_ms, ds_err *err);
/* *exists = 1 when all keys exist now; never blocks. */
int ds_store_check(ds_store_client *c, const char *const *keys, int nkeys, int *exists, ds_err *err);
int ds_store_delete(ds_store_client *c, const char *key, int *deleted, ds_err *err);

/* Barrier of `world` participants named `name` (a fresh name per use); the error on
 * timeout says how many arrived. */
int ds_store_barrier(ds_store_client *c, const char *name, int rank, int world,
                     int timeout_ms, ds_err *err);

/* Heartbeat from an agent: tells the controller node `node_rank` is alive. */
int ds_store_heartbeat(ds_store_client *c, int node_rank, ds_err *err);

/* The socket, for callers that poll it (e.g. the agent noticing a dropped controller). */
int ds_store_fd(const ds_store_client *c);

#endif
