/* Bounded start: at most [launch] max_handshakes SSH sessions are being opened at once
 * (docs/scale.md). A thousand simultaneous handshakes would swamp the controller's CPU,
 * the network and the nodes' sshd (MaxStartups), and every one would share one
 * connect_timeout; queued, each node's timeout runs from the start of its own opening.
 * Local and srun nodes start at once. */
#ifndef DS_START_QUEUE_H
#define DS_START_QUEUE_H

#include "job.h"

/* 1: start n now; 0: n waits (its state is DS_NODE_QUEUED) for ds_start_next.
 * in_flight: the SSH sessions opening now. Nodes are admitted in their order. */
int ds_start_admit(ds_job *job, ds_node *n, int in_flight);
/* The next queued node that may start now, with in_flight sessions opening (NULL when
 * none or no slot is free), without a walk over the nodes. When the job is stopping,
 * queued nodes never start: they are marked done instead. */
ds_node *ds_start_next(ds_job *job, int in_flight);

#endif
