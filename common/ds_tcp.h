/* TCP listeners and connections with deadlines: the controller's store and its srun
 * link listen this way; store clients and agents started by srun connect this way. */
#ifndef DS_TCP_H
#define DS_TCP_H

#include <stdint.h>

#include "ds_err.h"

/* Connects to host:port (any address family host resolves to), non-blocking attempts
 * bounded by deadline_ms (ds_now_ms clock; -1: none); refused connections are retried
 * until then, since the listener may not be up yet. Returns a non-blocking,
 * close-on-exec socket with TCP_NODELAY, or -1 with err "WHAT host:port: cannot connect: ...". */
int ds_tcp_connect(const char *what, const char *host, int port, int64_t deadline_ms, ds_err *err);

/* Listens on addr (a host name or address; NULL or "" for every address) and port (0:
 * a free one, returned in *bound_port). Returns a non-blocking, close-on-exec socket
 * with SO_REUSEADDR, or -1 with err "WHAT: cannot listen on addr:port: ...". */
int ds_tcp_listen(const char *what, const char *addr, int port, int *bound_port, ds_err *err);

#endif
