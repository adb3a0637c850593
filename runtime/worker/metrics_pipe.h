/* A rank's metrics channel to the controller: the agent gives each worker the write end
 * of a pipe as DS_METRICS_FD and forwards what arrives there as METRICS frames
 * (agent_proto.h). The script's ds.monitor writes one JSON object per line to it
 * (lua/ds/monitor.lua); the controller aggregates them (launcher/metrics.h). Without an
 * agent (`dsrun run`) there is no channel and publishing does nothing. */
#ifndef DS_METRICS_PIPE_H
#define DS_METRICS_PIPE_H

#include <stddef.h>

#include "ds_err.h"

/* Takes DS_METRICS_FD from the environment when set (and removes it, so the script's
 * children neither see it nor inherit the descriptor). */
int ds_metrics_pipe_open(ds_err *err);
/* 1 when a channel is open. */
int ds_metrics_pipe_enabled(void);
/* Writes one record (a line without its newline; the newline is added). 0 sent, 1 no
 * channel, -1 the channel failed (it is then closed: later records are dropped). */
int ds_metrics_pipe_send(const char *line, size_t n, ds_err *err);

#endif
