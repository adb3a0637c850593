/* The rank's progress reporter: a thread with its own store client that publishes,
 * every interval, "progress/<rank>" = "<seq> <step> <ms in op> <op>" (ds_progress.h;
 * seq counts the reports, so the controller sees a rank that stopped reporting at all).
 * The controller's hang detection ([restart] hang_timeout) reads it: a rank whose step
 * does not move is stuck, and the report says where. Started only when dslaunch asks
 * for it (DS_PROGRESS_MS). */
#ifndef DS_PROGRESS_REPORTER_H
#define DS_PROGRESS_REPORTER_H

#include "ds_err.h"

typedef struct ds_progress_reporter ds_progress_reporter;

/* Connects to the store at rdzv (through the node's agent when DS_STORE_SOCKET names its
 * socket, as ds_store_connect_rank does; token; keys under prefix) and starts the thread. */
ds_progress_reporter *ds_progress_reporter_start(const char *rdzv, const char *token, const char *prefix,
                                                 int rank, int interval_ms, ds_err *err);
/* Stops the thread and closes its connection. NULL is allowed. */
void ds_progress_reporter_stop(ds_progress_reporter *r);

#endif
