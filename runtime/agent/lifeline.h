/* A worker dies with its agent: the agent keeps the write end of a pipe whose read end
 * each worker has as DS_AGENT_FD. When the agent is gone the pipe reports hang-up and
 * the worker kills its own process group (itself and anything it started). This covers
 * what PR_SET_PDEATHSIG misses (the worker's children, a race at start). */
#ifndef DS_LIFELINE_H
#define DS_LIFELINE_H

#include "ds_err.h"

/* Starts the watching thread when DS_AGENT_FD is set; does nothing otherwise. */
int ds_lifeline_watch(ds_err *err);

#endif
