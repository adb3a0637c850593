/* Connecting to a TCP listener with a deadline: the store client and the agent's link
 * (started by srun) both reach the controller this way. */
#ifndef DS_TCP_H
#define DS_TCP_H

#include <stdint.h>

#include "ds_err.h"

/* Connects to host:port (any address family host resolves to), non-blocking attempts
 * bounded by deadline_ms (ds_now_ms clock; -1: none); refused connections are retried
 * until then, since the listener may not be up yet. Returns a non-blocking,
 * close-on-exec socket with TCP_NODELAY, or -1 with err "WHAT host:port: cannot connect: ...". */
int ds_tcp_connect(const char *what, const char *host, int port, int64_t deadline_ms, ds_err *err);

#endif
