/* The controller's link to one node's agent, over either transport: local pipes
 * (local.h) or an SSH channel (ssh.h). It queues bytes for the agent's stdin, reads the
 * agent's stdout as frames (agent_proto.h) and its stderr as lines, and knows when the
 * agent is gone. What the frames mean is the controller's business. */
#ifndef DS_NODE_H
#define DS_NODE_H

#include <poll.h>

#include "agent_proto.h"
#include "ds_err.h"
#include "local.h"
#include "plan.h"
#include "ssh.h"

typedef enum {
    DS_NODE_QUEUED,     /* not started yet: waits for a free handshake slot (start_queue.h) */
    DS_NODE_CONNECTING, /* SSH session opening */
    DS_NODE_STARTED,    /* agent process running, HELLO not yet seen */
    DS_NODE_RUNNING,    /* HELLO seen: store connected, workers starting */
    DS_NODE_DONE,       /* agent gone (or never started); see failed/error */
} ds_node_state;

struct ds_node;

/* The nodes given work that none of their descriptors will announce: a stop or a kill to
 * send, data libssh2 holds (pending), a reaped agent, a start, an end. A loop that turns
 * only the nodes whose descriptors are ready (node_set.h) turns these too; a node is on
 * the list at most once (ds_node_wake). */
typedef struct ds_node_wakes {
    struct ds_node *head;
} ds_node_wakes;

typedef struct ds_node {
    const ds_plan_node *plan;
    ds_node_state state;
    int via_ssh;
    ds_local local;
    ds_ssh *ssh;
    ds_buf to_agent;   /* queued for its stdin */
    ds_buf from_agent; /* stdout bytes not yet parsed into frames */
    ds_buf err_line;   /* its stderr line being assembled */
    int close_stdin;     /* asked to close stdin once to_agent is sent */
    int stdin_closed;
    int out_eof, err_eof;
    int reaped;          /* local agent waited for */
    int bye;             /* the agent said goodbye: it ended in order */
    int failed;          /* could not start, protocol error, or lost */
    long long failed_wall_ms; /* wall clock when the failure was noticed */
    int stop_kill;       /* killed by dslaunch because it did not stop in time */
    int agent_pid;       /* on its node, from HELLO (0 until then) */
    char cgroup[1024];   /* the node's cgroup for the job, from HELLO ("" when none) */
    char *kill_cmd;      /* SSH: the command ds_node_kill_hard runs on a second channel */
    int kill_sent;
    int pending;         /* SSH: libssh2 may hold data poll cannot see; look again next pass */
    ds_node_wakes *wakes; /* where ds_node_wake puts it (NULL: its loop looks at every node) */
    struct ds_node *wake_next;
    int woken;           /* on wakes' list */
    char last_agent_line[512]; /* the agent's (or its shell's) last stderr line */
    char error[1024];
} ds_node;

typedef struct ds_node_handler {
    void *ctx;
    void (*frame)(void *ctx, ds_node *n, const ds_frame *f);
    void (*agent_line)(void *ctx, ds_node *n, const char *line); /* agent's own stderr */
} ds_node_handler;

/* Starts the agent: fork/exec (local) or an SSH session (command runs once open). */
int ds_node_start_local(ds_node *n, char *const argv[], ds_err *err);
int ds_node_start_ssh(ds_node *n, ds_ssh_opts *o, const char *command, ds_err *err); /* takes o */
/* An agent someone else starts and serves (an srun step, a relay): to the loop it is a
 * local agent that has started, over three non-blocking pipes, with nothing to reap. far
 * gets the other ends, as the agent would see them: stdin's read end, stdout's and
 * stderr's write ends. */
int ds_node_start_piped(ds_node *n, int far[3], ds_err *err);

/* Puts the node on its wakes list (once) for the loop's next pass. node.c does it for
 * every change it makes outside a turn (and for pending); whoever else gives a node work
 * its descriptors will not announce (queues bytes, marks it done) calls it too. */
void ds_node_wake(ds_node *n);

/* Adds the node's descriptors to pf (at most 3); returns how many. */
int ds_node_pollfds(ds_node *n, struct pollfd *pf);
/* 1 when the node has something to do: one of its descriptors is ready (ready: the
 * loop's epoll set said so, node_set.h), libssh2 may hold data for it, its opening's
 * deadline passed, its local agent was reaped, or a kill is to be sent. The loop calls
 * ds_node_io only then: an idle node costs nothing per pass. */
int ds_node_turn(const ds_node *n, int ready, long long now_ms);
/* Does whatever I/O is possible now (never blocks) and calls h for each frame/line.
 * Sets state DONE when the agent is gone. */
void ds_node_io(ds_node *n, const ds_node_handler *h);
/* SIGCHLD arrived: reaps the local agent if it exited. */
void ds_node_reap(ds_node *n);
/* Closes the agent's stdin (after what is queued): the agent stops its workers. */
void ds_node_stop(ds_node *n);
/* For an agent that does not answer: SIGKILL to the local agent, or over SSH runs
 * remote_cmd (which should kill the agent and its ranks' groups) on a second channel.
 * The agent's death then ends the node as usual (its ranks follow through their
 * lifelines). */
void ds_node_kill_hard(ds_node *n, const char *remote_cmd);
/* Gives up on the node now: kills a local agent, drops an SSH session. */
void ds_node_abandon(ds_node *n, const char *why);
/* The deadline of the opening (SSH), or -1. */
long long ds_node_deadline_ms(const ds_node *n);
void ds_node_keepalive(ds_node *n);
void ds_node_free(ds_node *n);

#endif
