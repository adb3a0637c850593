/* The srun step's state, shared by its setup and teardown (srun.c, the controller's
 * thread) and the thread that serves it (srun_serve.c). After launch only the serving
 * thread touches it, except `forwarded` (the controller's thread only) and the wake
 * pipe that asks the thread to end the step. */
#ifndef DS_SRUN_STEP_H
#define DS_SRUN_STEP_H

#include <pthread.h>
#include <stdio.h>
#include <sys/types.h>

#include "ds_buf.h"
#include "store_token.h"

/* The step's view of one node. The controller holds the other ends of the pipes. */
typedef struct srun_node {
    const char *host; /* the plan's host: the Slurm node name its agent reports */
    int index;        /* node index in the job */
    int in_r;         /* the controller's bytes for the agent (read end), -1 once closed */
    int out_w, err_w; /* the agent's frames and stderr lines for the controller (write ends) */
    int sock;         /* the agent's link once it joined, else -1 */
    int procid;       /* its srun task once joined, else -1 */
    ds_buf to_sock;   /* read from in_r, not yet sent to the agent */
    ds_buf to_out;    /* read from the link, not yet passed to the controller */
    int in_eof;       /* the controller closed in_r: shut the link's sending side once to_sock is out */
    int sock_eof;     /* the agent closed the link */
    int done;         /* every descriptor closed: the controller sees its agent gone */
} srun_node;

/* A connection that has not said JOIN yet. */
typedef struct srun_pending {
    int fd;
    ds_buf in;
    long long deadline_ms;
    char peer[64];
} srun_pending;

#define SRUN_LAST_LINES 4

typedef struct ds_srun_step {
    srun_node *nodes;
    int nnodes;
    char token[DS_STORE_TOKEN_LEN + 1];
    char link[300];      /* host:port the agents connect to */
    int listen_fd;
    srun_pending *pending;
    int npending;
    int join_timeout_ms; /* how long agents may take to join ([rendezvous] timeout) */
    int grace_ms;        /* how long srun may take to end once asked */

    pid_t pid;           /* srun, 0 once reaped */
    int pidfd;           /* readable when srun exits; -1 where the kernel has none */
    int in_w;            /* srun's stdin: the bootstrap frames, then kept open */
    int out_r, err_r;    /* srun's stdout and stderr, -1 at EOF */
    ds_buf bootstrap;    /* not yet written to srun's stdin */
    ds_buf out_line, err_line; /* srun's output being cut into lines */
    int status;          /* srun's wait status once reaped */
    char last[SRUN_LAST_LINES][512]; /* the last lines nobody else took, for failures */
    int nlast;
    FILE *log;           /* attempt-K/srun.log: everything srun said */

    int wake[2];         /* the controller writes a byte: end the step */
    int stopping;        /* the thread is ending the step */
    pthread_t thread;
    int thread_started;

    unsigned long long forwarded; /* signals already passed on (controller's thread only) */
} ds_srun_step;

/* The serving thread (srun_serve.c). */
void *ds_srun_serve(void *step);
/* Ends node sn with why as its agent's last words: the controller sees it gone. */
void ds_srun_fail_node(ds_srun_step *st, srun_node *sn, const char *why);

#endif
