/* One run of a job as the controller sees it: the nodes, every rank's state, why it is
 * stopping. Shared by the controller's loop (controller.c), the handling of what agents
 * report (job_report.c) and the final summary (summary.c). */
#ifndef DS_JOB_H
#define DS_JOB_H

#include <sys/types.h>

#include "events.h"
#include "jobspec.h"
#include "logs.h"
#include "monitor.h"
#include "node.h"
#include "plan.h"
#include "store_server.h"

/* TERM to KILL on every node when a job stops (the agent's grace period). */
#define DS_STOP_GRACE_MS 3000
/* How long after KILL the controller still waits for agents to report before it kills
 * the agents themselves (a second SSH channel), and how long after that before it drops
 * them (a dropped agent still stops its node when it sees its stdin close). */
#define DS_STOP_SLACK_MS 2000
#define DS_DROP_AFTER_MS 2000

typedef enum { DS_RANK_PENDING, DS_RANK_RUNNING, DS_RANK_EXITED } ds_rank_state;

typedef struct ds_rank_status {
    ds_rank_state state;
    pid_t pid;           /* on its node */
    int code, sig;       /* exit code, or the signal that killed it (sig > 0) */
    int after_stop;      /* it ended after the job began stopping */
} ds_rank_status;

typedef struct ds_job {
    const ds_jobspec *spec;
    const ds_plan *plan;
    char id[192];          /* DS_JOB_ID: name-<8 hex>, unique per run */
    char *log_root;        /* <logs.dir>/<name> */
    char *attempt_dir;     /* <log_root>/attempt-K */
    int attempt;
    char token[65];
    ds_store_server *store;
    char rdzv[300];        /* host:port the ranks reach the store at */
    ds_events *ev;
    ds_logs *logs;
    ds_monitor *monitor;   /* metrics, reports, the progress line (monitor_job.c) */
    ds_node *nodes;
    ds_rank_status *ranks;
    int nstarted, nexited, nfailed_ranks;
    int nqueued;           /* nodes waiting for a handshake slot (start_queue.h) */
    long long t0_ms, all_started_ms;
    int stopping;
    long long kill_at_ms;  /* after this, agents still there are killed ... */
    long long drop_at_ms;  /* ... and after this, dropped */
    int first_failed_rank; /* -1 when the job did not fail because of a rank */
    char failure[1024];    /* why the job stops; empty while all is well */
    int interrupted;       /* the signal that asked us to stop, 0 if none */
    struct ds_srun_step *srun; /* [launch] method = srun: the step every agent runs in (srun.h) */
} ds_job;

/* Begins stopping every node (once); the first reason given is the one reported. */
void ds_job_stop(ds_job *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Handlers for what a node's agent says (job_report.c). */
void ds_job_on_frame(void *job, ds_node *n, const ds_frame *f);
void ds_job_on_agent_line(void *job, ds_node *n, const char *line);
/* A node's agent is gone: checks it ended in order. */
void ds_job_on_node_done(ds_job *job, ds_node *n);
/* Kills a node's agent and ranks without asking it (ds_node_kill_hard). */
void ds_job_kill_node(ds_job *job, ds_node *n);

/* The job's monitor, opened in the attempt's directory (job->monitor), and its end
 * (final rows and report) once every node is done (monitor_job.c). */
int ds_job_monitor_open(ds_job *job, ds_err *err);
void ds_job_monitor_end(ds_job *job);

/* Prints the end-of-job summary on stderr and returns dslaunch's exit status. */
int ds_job_summary(ds_job *job);

#endif
