/* The relay tree (docs/scale.md#relays). Past [launch] relay_threshold nodes the
 * controller does not start every node's agent itself: it starts ~√N relays, each
 * `dslaunch --relay` on the first node of its share (fork/exec when that is this machine,
 * else over SSH), and each relay starts its share's agents (fork/exec on its own node,
 * SSH to the others, at most [launch] max_handshakes opening at once) and carries their
 * control streams over its one link (agent_proto.h, RELAY_* frames). The store is not
 * relayed: agents still connect to it themselves.
 *
 * To the controller's loop a relayed node looks like a local agent (three pipes, as an
 * srun node does): a thread (relay_link.c) moves bytes between those pipes and the
 * relays' links, so supervision, restarts and summaries need nothing new. A relay that
 * is lost ends every node of its share, with the relay's host and nodes as the agents'
 * last words. A relay whose stdin reaches EOF (the controller stopped it or is gone)
 * closes its agents' stdin: their dead-man switch stops the nodes. */
#ifndef DS_RELAY_H
#define DS_RELAY_H

#include "ds_err.h"

struct ds_job;
struct ds_node;

/* `dslaunch --relay`: serves one share of nodes on stdin/stdout; returns the exit status. */
int ds_relay_main(void);

/* 1 when this attempt's nodes start through relays ([launch] relay_threshold). */
int ds_relay_wanted(const struct ds_job *job);

/* Makes n one of the relayed nodes: it gets its pipes and is STARTED; its agent starts
 * when its relay does (ds_relay_launch). */
int ds_relay_attach(struct ds_job *job, struct ds_node *n, ds_err *err);

/* Starts the relays of the attached nodes and the thread that serves them. A relay that
 * cannot start ends its nodes with the reason. */
void ds_relay_launch(struct ds_job *job);

/* Ends the relays (their stdin closed, killed when they linger) and the thread. */
void ds_relay_free(struct ds_job *job);

#endif
