/* Client of the rendezvous key-value store served by the controller (like torchrun's
 * c10d store). Blocking calls with timeouts; one connection per client; not thread-safe
 * (use one client per thread). Keys are namespaced by attempt through the client's
 * prefix (ds_store_set_prefix). Timeouts: timeout_ms < 0 waits forever.
 *
 * CONTRACT for the parts that use it (agent, worker, comm, Lua bindings). The wire
 * protocol and the server live beside it (store_proto.h, launcher's store server). */
#ifndef DS_STORE_CLIENT_H
#define DS_STORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"

typedef struct ds_store_client ds_store_client;

/* Connects to host:port and presents the job token. timeout_ms bounds connect + auth;
 * refused connections are retried within it (the store may not listen yet). A wrong
 * token fails with "store H:P refused this client (wrong token, ...)". */
ds_store_client *ds_store_connect(const char *host, int port, const char *token,
                                  int timeout_ms, ds_err *err);
/* The same through this node's agent (DS_STORE_SOCKET: a Unix socket, "@name" for an
 * abstract one), which carries its node's ranks on its one connection to the store
 * (runtime/agent/store_mux.c). where names the store in messages (DS_RDZV). */
ds_store_client *ds_store_connect_unix(const char *path, const char *where, const char *token,
                                       int timeout_ms, ds_err *err);
/* A rank's connection: through its agent when DS_STORE_SOCKET is set (as the agent sets
 * it for its workers), else straight to rdzv ("host:port", DS_RDZV). */
ds_store_client *ds_store_connect_rank(const char *rdzv, const char *token, int timeout_ms, ds_err *err);
void ds_store_close(ds_store_client *c);

/* Prepends prefix to every key this client names from now on (barrier keys included).
 * The worker sets "a<attempt>/" right after connecting, so every user of its client
 * (comm, Lua, barrier) is namespaced by attempt without thinking about it. */
int ds_store_set_prefix(ds_store_client *c, const char *prefix, ds_err *err);

/* Splits "host:port" (DS_RDZV's form; the last ':' separates, an IPv6 host may be in
 * brackets, "[::1]:29400", or bare, "::1:29400") into host (brackets removed) and port. */
int ds_store_split_addr(const char *addr, char *host, size_t cap, int *port, ds_err *err);

/* "host:port", as error messages name the store. */
const char *ds_store_where(const ds_store_client *c);

int ds_store_set(ds_store_client *c, const char *key, const void *val, size_t len, ds_err *err);
/* Blocks until key exists or timeout_ms passes (error naming the key). *val is malloc'd
 * with one NUL byte past *len, so a string value can be used as it is. */
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
 * timeout says how many arrived and which ranks are missing (store_barrier.c). */
int ds_store_barrier(ds_store_client *c, const char *name, int rank, int world,
                     int timeout_ms, ds_err *err);
/* Its two requests (store_proto.h, BARRIER): rank arrives at the barrier of key and
 * waits for all world ranks: 0, 1 on timeout, -1 on error. And who arrived, at once:
 * *arrived, *missing, and the first DS_STORE_BARRIER_LISTED missing ranks in listed. */
int ds_store_barrier_arrive(ds_store_client *c, const char *key, int rank, int world, int timeout_ms, ds_err *err);
int ds_store_barrier_status(ds_store_client *c, const char *key, int world, int *arrived, int *missing,
                            int *listed, int *nlisted, ds_err *err);
/* The same after a timeout, for a message: the listed missing ranks as text ("2, 5") in
 * list (cap bytes), how many of them in *nlisted. */
int ds_store_barrier_who(ds_store_client *c, const char *key, int world, int *arrived, int *missing,
                         char *list, size_t cap, int *nlisted, ds_err *err);

/* Heartbeat from an agent: tells the controller node `node_rank` is alive. */
int ds_store_heartbeat(ds_store_client *c, int node_rank, ds_err *err);

/* The socket, for callers that poll it (e.g. the agent noticing a dropped controller). */
int ds_store_fd(const ds_store_client *c);

#endif
