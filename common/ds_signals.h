/* Signals as file descriptor events: the controller and the agent each run one poll
 * loop, and a signal handled there (instead of in an async handler) can do anything the
 * loop can. */
#ifndef DS_SIGNALS_H
#define DS_SIGNALS_H

#include <pthread.h>

#include "ds_err.h"

/* Blocks the signals in sigs (0-terminated) and returns a non-blocking, close-on-exec
 * signalfd that reports them; SIGPIPE is ignored, since a peer that goes away is an
 * error on the write, not a reason to die. The blocked mask is inherited across exec, so
 * a child that wants default signal handling must unblock them (ds_signals_unblock). -1
 * with err on failure. */
int ds_signals_fd(const int *sigs, ds_err *err);
/* Unblocks every signal and restores SIGPIPE's default, in a child between fork and exec
 * (async-signal-safe). */
void ds_signals_unblock(void);
/* Starts fn(arg) on a thread that never takes a signal (they are the loop's business);
 * returns pthread_create's result. */
int ds_signals_thread(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
