/* The node's one connection to the controller's store, shared by its ranks
 * (docs/scale.md). The agent listens on a Unix socket; each rank connects there
 * (ds_store_connect_unix, DS_STORE_SOCKET) and speaks the store's protocol as if to the
 * store itself; the mux sends each request on as TAGGED (store_proto.h), one tag per
 * rank connection, and hands each answer back to its rank. A rank's waiting GET never
 * holds another's request back; a rank that goes away cancels what it was waiting for.
 * The store then holds N connections for N nodes, not one per rank.
 *
 * It runs on a thread of its own, so the agent's loop stays as it was: the agent's
 * heartbeats go through it, and its descriptor becomes readable when the connection to
 * the store is lost. */
#ifndef DS_STORE_MUX_H
#define DS_STORE_MUX_H

#include "ds_err.h"

struct ds_store_client;
typedef struct ds_store_mux ds_store_mux;

/* Takes over c's connection (c must see no other request from then on), listens on
 * the abstract socket @dsrun-agent-<pid>-store and puts it in the environment as
 * DS_STORE_SOCKET for the workers the agent starts. token: what ranks must present.
 * world and this node's ranks (nranks of them): barriers of that world are joined on
 * the node before one request goes to the store (barrier_join.h); nranks 0: none is. */
ds_store_mux *ds_store_mux_start(struct ds_store_client *c, const char *token, int world, const int *ranks,
                                 int nranks, ds_err *err);
/* Readable once the connection to the store is lost (or the store dropped the node). */
int ds_store_mux_fd(const ds_store_mux *m);
/* Queues a heartbeat of node_rank; -1 when the connection is lost. */
int ds_store_mux_heartbeat(ds_store_mux *m, int node_rank);
/* Why the connection was lost ("" while it is not). */
const char *ds_store_mux_error(const ds_store_mux *m);
/* Stops the thread and closes every rank's connection (not c: the caller closes it). */
void ds_store_mux_stop(ds_store_mux *m);

#endif
