/* The watch over a communicator's ops in flight (NCCL's, from their issue to their end:
 * the host may never wait for them itself, as ds_comm_wait only makes the compute stream
 * wait on their event): while any is in flight it looks at them, the communicator's asynchronous error and the peers' failures
 * in the store, and past the timeout or on any failure stops the communicator once,
 * through the backend's abort, which also makes the failure the device's error, so the
 * host's next wait on the device (the loss read, a sync) returns it instead of hanging.
 *
 * The decisions are in ds_comm_watch_check, which takes the time as an argument and asks
 * the backend through callbacks, so they are tested without a GPU or a thread
 * (test_comm_watch); ds_comm_watch_start runs it on a thread of its own. Not in comm.h:
 * for backends only. */
#ifndef DS_COMM_WATCH_H
#define DS_COMM_WATCH_H

#include "ds_err.h"

typedef struct ds_comm_watch ds_comm_watch;

typedef struct ds_comm_watch_ops {
    /* 1: the op is done; 0: still running; -1: it failed (why in err). */
    int (*op_state)(void *be, void *op, ds_err *err);
    void (*op_free)(void *be, void *op);
    /* 1 with err filled: the communicator reports an asynchronous error. */
    int (*comm_error)(void *be, ds_err *err);
    /* 1 with err filled: a peer published its failure (ds_comm_peers_failed). */
    int (*peer_failed)(void *be, ds_err *err);
    /* Stops the communicator (why: the failure; tell_peers: publish it, 0 when it is a
     * peer's). Called once, from the watch's thread, without the watch's lock. */
    void (*stop)(void *be, const ds_err *why, int tell_peers);
    /* First thing on the watch's thread (NULL: nothing), e.g. making the GPU current. */
    void (*on_thread)(void *be);
} ds_comm_watch_ops;

/* How long the oldest op may run before the store is asked about peers, and how often. */
#define DS_COMM_WATCH_PEERS_AFTER_MS 100
#define DS_COMM_WATCH_PEERS_EVERY_MS 250

/* what names the ops in messages ("nccl op"); timeout_ms bounds each op from its add. */
ds_comm_watch *ds_comm_watch_new(const ds_comm_watch_ops *ops, void *be, const char *what,
                                 int timeout_ms, ds_err *err);
/* The thread that calls ds_comm_watch_check every poll_ms while ops are in flight, and
 * sleeps otherwise. */
int ds_comm_watch_start(ds_comm_watch *w, int poll_ms, ds_err *err);
/* Hands op over (added at now_ms); -1 with the watch's failure when it stopped already
 * (op is then freed here). */
int ds_comm_watch_add(ds_comm_watch *w, void *op, long long now_ms, ds_err *err);
/* One look at now_ms: frees the finished ops; 1 with why filled when the communicator
 * was stopped (now or earlier), 0 otherwise. One caller at a time: the watch's thread
 * once started. */
int ds_comm_watch_check(ds_comm_watch *w, long long now_ms, ds_err *why);
/* 1 with why filled when the watch stopped the communicator. */
int ds_comm_watch_stopped(ds_comm_watch *w, ds_err *why);
/* Ops still in flight. */
int ds_comm_watch_pending(ds_comm_watch *w);
/* Stops the thread and frees what is left (NULL allowed). */
void ds_comm_watch_free(ds_comm_watch *w);

#endif
