/* `dsrun agent`: one per node, started by the controller (fork/exec or SSH). Reads the
 * node's part of the plan as frames on stdin (agent_proto.h), starts the node's workers,
 * forwards their output, reports their exits, heartbeats to the store, and stops every
 * worker when stdin reaches EOF, the store connection drops or it gets SIGTERM. */
#ifndef DS_AGENT_H
#define DS_AGENT_H

#include <sys/types.h>

#include "agent_proto.h"
#include "ds_err.h"

struct ds_store_client;

typedef struct ds_agent_worker {
    int rank;
    char **env;    /* "KEY=VALUE" from the plan, NULL-terminated */
    int nenv;
    pid_t pid;     /* 0 until started */
    int out_fd, err_fd; /* read ends of its stdout / stderr pipes; -1 once at EOF */
    int metrics_fd;     /* read end of its metrics pipe (DS_METRICS_FD); -1 once at EOF */
    int rec_fd;         /* read end of its failure-record pipe (DS_ERROR_FD), -1 once read */
    char *cgroup;       /* its cgroup (cgroup.h), NULL when the node has none for it */
    int running;
} ds_agent_worker;

typedef struct ds_agent {
    /* from CONFIG frames */
    char *job, *host, *rdzv, *token, *workdir, *script;
    char *link; /* started by srun: the controller's link address (agent_link.c) */
    char **args;
    int nargs;
    int node, heartbeat_ms, grace_ms, rdzv_timeout_ms;
    int program;       /* kind=program: script is not Lua, it runs as a process per rank */
    char **interp;     /* interp frames: its interpreter (NULL: by its #! line) */
    int ninterp;
    int attempt;       /* the job's attempt (keys of the store that are per attempt) */
    int master_port;   /* MASTER_PORT asked for; 0: any free port on node 0 */
    char **program_argv; /* the program's command line on this node (program.c) */
    int local_rank_arg;  /* add --local_rank=N to a program's arguments (DeepSpeed's habit) */
    int progress_ms; /* > 0: workers report their progress this often (DS_PROGRESS_MS) */
    int ckpt_mode;   /* > 0: the mode of checkpoint directories (DS_CKPT_MODE) */
    char *errdir;    /* program ranks: where their TORCHELASTIC_ERROR_FILEs go (error_file.h) */
    int errdir_lock; /* its flock, held while the agent lives; -1: none */
    char *cg_base;   /* this node's cgroup for the job (cgroup.h), NULL: subreapers */
    char cg_why[256];/* why there is none */

    ds_agent_worker *workers;
    int nworkers;

    int in_fd, out_fd; /* where frames come from and go to: stdin and stdout, or the link */
    struct ds_store_client *store;
    struct ds_store_mux *mux; /* the ranks' store traffic on the agent's connection (store_mux.h) */
    int sigfd;        /* signalfd: SIGCHLD, SIGTERM, SIGINT, SIGHUP */
    int lifeline_w;   /* write end only the agent holds: workers die when it closes */
    int lifeline_r;   /* read end every worker inherits as DS_AGENT_FD */
    int stopping;
    long long kill_at_ms; /* when stopping: the moment TERM turns into KILL */
    int controller_gone;  /* stdout write failed: nobody to report to */
} ds_agent;

/* Reads CONFIG/RANK/ENV frames from fd until GO (agent_config.c). */
int ds_agent_read_config(ds_agent *a, int fd, ds_err *err);
void ds_agent_free(ds_agent *a);

/* Started by srun (a->link set): connects to the controller's link, says which node this
 * is, reads this node's plan from it, and makes it in_fd and out_fd (agent_link.c). */
int ds_agent_join(ds_agent *a, ds_err *err);

/* Starts worker w (spawn.c): its own process group, stdout/stderr pipes, the lifeline as
 * fd 3, the metrics pipe as fd 4 (DS_METRICS_FD), the failure-record pipe as fd 5
 * (DS_ERROR_FD), death signal tied to the agent, the plan's environment over the
 * agent's. */
int ds_agent_spawn(ds_agent *a, ds_agent_worker *w, ds_err *err);

/* The command line that runs a program that is not Lua (program.c), in the workdir:
 * the interpreter given, else the program's #! line, else the program itself when it is
 * executable, else python3 for a .py file; a name that is no file of the workdir is
 * looked up in PATH. NULL-terminated, malloc'd (free with ds_agent_free_words). */
char **ds_agent_program_argv(char *const *interp, int ninterp, const char *program,
                             char *const *args, int nargs, ds_err *err);
void ds_agent_free_words(char **words);

/* MASTER_PORT (master_port.c): node 0's agent finds the port asked for (or any) free on
 * its node and publishes it in the store; every agent waits for it, heartbeating, and
 * gives it to its workers. Returns 0, -1 on error (err says why), or 1 when node 0 failed
 * (it reports why) and this node should only wait to be stopped. */
int ds_agent_master_port(ds_agent *a, ds_err *err);


#endif
