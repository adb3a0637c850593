/* The rendezvous key-value store served by the controller (like torchrun's c10d store).
 * It runs in its own thread with its own poll loop, so blocking gets and waits of ~100
 * clients never block the controller; the controller learns what happens through an
 * event queue whose fd it adds to its own poll set.
 *
 * Security: every connection must present the job token (64 hex chars, see
 * ds_store_make_token in store_token.h) in its first frame. A client with a wrong
 * token, a malformed frame, a key over DS_STORE_MAX_KEY or a value over
 * DS_STORE_MAX_VALUE is dropped and reported as DS_STORE_EV_CLIENT_REJECTED; the
 * server and every other client go on untouched. Protocol and limits: store_proto.h,
 * docs/rendezvous.md. */
#ifndef DS_STORE_SERVER_H
#define DS_STORE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "store_proto.h" /* limits */
#include "store_token.h" /* ds_store_make_token */

typedef struct ds_store_server ds_store_server;

typedef enum ds_store_event_kind {
    DS_STORE_EV_NODE_CONNECTED = 1, /* first heartbeat of node_rank on a connection */
    DS_STORE_EV_NODE_LOST,          /* that connection dropped (EOF, error or rejected) */
    DS_STORE_EV_CLIENT_REJECTED,    /* a client was dropped: peer and reason say who, why */
} ds_store_event_kind;

typedef struct ds_store_event {
    ds_store_event_kind kind;
    int node_rank;       /* NODE_*: the node; CLIENT_REJECTED: its node if it had one, else -1 */
    char peer[64];       /* "ip:port" of the connection */
    char reason[256];    /* CLIENT_REJECTED and NODE_LOST: what happened, in words */
    int64_t time_ms;     /* CLOCK_MONOTONIC, milliseconds */
} ds_store_event;

/* Binds addr ("0.0.0.0", "127.0.0.1", an IPv6 literal or a host name) and port (0 picks a
 * free port: read it back with ds_store_server_port), starts the server thread.
 * token: the job's 64 hex chars. A connection must AUTH within 10 s
 * (DS_STORE_AUTH_TIMEOUT_MS in the environment overrides). Blocks every signal in the
 * server thread, so the controller's signal handling is unaffected. */
int ds_store_server_start(const char *addr, int port, const char *token,
                          ds_store_server **out, ds_err *err);

/* The bound port (the real one when 0 was asked). */
int ds_store_server_port(const ds_store_server *srv);

/* Stops the thread, closes every connection, frees everything. NULL is allowed. */
void ds_store_server_stop(ds_store_server *srv);

/* Readable (POLLIN) exactly while at least one event is queued. Do not read it yourself:
 * drain with ds_store_server_next_event until it returns 0. */
int ds_store_server_event_fd(const ds_store_server *srv);

/* Pops the oldest event into *ev: returns 1, or 0 when the queue is empty. The queue
 * holds at most DS_STORE_MAX_EVENTS; beyond that new CLIENT_REJECTED events are counted
 * and dropped (a flood of bad clients cannot grow the controller's memory), node events
 * are always kept. */
int ds_store_server_next_event(ds_store_server *srv, ds_store_event *ev);
#define DS_STORE_MAX_EVENTS 4096

/* Time of node_rank's last heartbeat (CLOCK_MONOTONIC ms, compare with
 * ds_now_ms()), or -1 if it never sent one. Safe from any thread. */
int64_t ds_store_server_last_heartbeat_ms(ds_store_server *srv, int node_rank);

/* Sets a key from the controller itself (e.g. an abort flag): wakes clients waiting on
 * it. Safe from any thread. The key is used as given (no attempt prefix is added). */
int ds_store_server_set(ds_store_server *srv, const char *key, const void *val, size_t len,
                        ds_err *err);

/* Reads a key from the controller itself (as given, no attempt prefix): 1 with a copy of
 * its value in *val (malloc'd, NUL-terminated, *len bytes; val may be NULL to test
 * existence only), 0 when it does not exist, -1 when out of memory. Safe from any thread. */
int ds_store_server_get(ds_store_server *srv, const char *key, char **val, size_t *len);

/* Authenticated connections open now / requests blocked in GET or WAIT now (for tests
 * and the status line). */
int ds_store_server_nclients(ds_store_server *srv);
int ds_store_server_nwaiting(ds_store_server *srv);
/* Requests of op (store_proto.h: DS_STORE_OP_*) served so far, a TAGGED frame counted as
 * the request it carries; op 0 counts unknown ops. For the controller's end-of-attempt
 * line in launcher.log (tests count the store's requests per barrier from it). */
uint64_t ds_store_server_requests(ds_store_server *srv, int op);
/* "N requests: auth a, set b, ..., heartbeat h, unknown u" into buf. */
void ds_store_server_describe_requests(ds_store_server *srv, char *buf, size_t cap);

#endif
