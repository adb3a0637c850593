/* One run of a job as the controller sees it: the nodes, every rank's state, why it is
 * stopping. One ds_job lives for the whole invocation (its id, run directory, store and
 * launcher.log); each attempt (the first run and every restart) resets the per-attempt
 * part (ds_job_begin_attempt). Shared by the controller's loop (controller.c), the
 * handling of what agents report (job_report.c), the root cause (failure.c), the
 * restart policy (restart.c) and the summaries (summary.c). */
#ifndef DS_JOB_H
#define DS_JOB_H

#include <sys/types.h>

#include "events.h"
#include "failure.h"
#include "fetch.h"
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

/* What the controller last saw of a rank's progress report (rank_progress.c). */
typedef struct ds_rank_progress {
    long long seq, step;       /* step -1: none started yet */
    long long seq_ms, step_ms; /* (monotonic) when seq / step last changed */
    long long op_ms;           /* how long it had waited in op at that report */
    char op[96];               /* the collective it waits in, "" if none */
    int reported;
} ds_rank_progress;

typedef struct ds_rank_status {
    ds_rank_state state;
    pid_t pid;           /* on its node */
    int code, sig;       /* exit code, or the signal that killed it (sig > 0) */
    int after_stop;      /* it ended after the job began stopping */
    long long ended_ms;  /* wall clock when it ended, as its agent saw it (0: unknown) */
    ds_failure_record rec; /* what it wrote when it ended by an error (rec.kind[0] = 0: none) */
    ds_rank_progress progress;
} ds_rank_status;

struct ds_restart;

typedef struct ds_job {
    const ds_jobspec *spec;
    const ds_plan *plan;   /* this attempt's plan (restarts may replace or drop nodes) */
    char id[192];          /* DS_JOB_ID: name-<8 hex>, unique per invocation */
    char *job_dir;         /* <logs.dir>/<name> */
    char *run_dir;         /* <job_dir>/<run id>: this invocation's logs, never reused */
    char *attempt_dir;     /* <run_dir>/attempt-K */
    char token[65];
    ds_store_server *store;
    char rdzv[300];        /* host:port the ranks reach the store at */
    ds_events *ev;
    struct ds_notify *notify; /* the webhook's sender, NULL without one */
    ds_fetch_set files;    /* the script and arguments fetched by URL (fetch.h) */
    struct ds_restart *restart; /* the policy's state across attempts (restart.h) */
    long long run_t0_ms;   /* when the invocation began */
    int interrupted;       /* the signal that asked us to stop, 0 if none */
    int sched_signal;      /* a signal Slurm sent every process of the job (srun.c), 0 if none */
    long long logs_lost;   /* bytes of rank logs lost so far (a full disk) */
    int drain_sig;         /* the signal that asked for a drain, 0 if none (drain.c) */
    int metrics_port;      /* the Prometheus endpoint's port once bound, kept by restarts (0: none yet) */

    /* ---- per attempt (ds_job_begin_attempt resets these) ---- */
    int attempt;
    ds_logs *logs;
    ds_monitor *monitor;   /* metrics, reports, the progress line (monitor_job.c) */
    ds_node *nodes;
    ds_node_wakes wakes;   /* the nodes given work no descriptor announces (node.h) */
    ds_rank_status *ranks;
    int nstarted, nexited, nfailed_ranks;
    int nqueued;           /* nodes waiting for a handshake slot (start_queue.h) */
    int queue_at;          /* ... none of them before this node */
    long long t0_ms, all_started_ms;
    int stopping;
    long long stop_wall_ms; /* wall clock when stopping began: what ends later was stopped */
    long long kill_at_ms;  /* after this, agents still there are killed ... */
    long long drop_at_ms;  /* ... and after this, dropped */
    long long drain_deadline_ms; /* a drain not done by then is stopped */
    char failure[1024];    /* why the job stops, as first heard; empty while all is well */
    ds_failure hang;       /* a hang found (rank_progress.c); hang.what[0] = 0: none */
    long long resumed_step; /* where the ranks said they resumed, -1 until they do */
    ds_root_cause root;    /* after the attempt: the failure that caused the others */
    struct ds_srun_step *srun; /* [launch] method = srun: the step every agent runs in (srun.h) */
    struct ds_relay_set *relays; /* past [launch] relay_threshold: the relays the nodes start through (relay.h) */
} ds_job;

/* Frees the previous attempt's part (if any) and sets up attempt `attempt` on plan:
 * its log directory, nodes and ranks. -1 with err when the logs cannot be opened. */
int ds_job_begin_attempt(ds_job *job, int attempt, const ds_plan *plan, ds_err *err);
/* Frees what the last attempt holds. */
void ds_job_end_attempt(ds_job *job);

/* Begins stopping every node (once); the first reason given is the one reported. */
void ds_job_stop(ds_job *job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Handlers for what a node's agent says (job_report.c). */
void ds_job_on_frame(void *job, ds_node *n, const ds_frame *f);
void ds_job_on_agent_line(void *job, ds_node *n, const char *line);
/* A node's agent is gone: checks it ended in order. */
void ds_job_on_node_done(ds_job *job, ds_node *n);
/* Kills a node's agent and ranks without asking it (ds_node_kill_hard). */
void ds_job_kill_node(ds_job *job, ds_node *n);
/* Draining (drain.c): sig asked every rank to checkpoint at a common step and exit.
 * When no rank of the attempt has polled for drains yet, the job is stopped instead. */
void ds_job_drain(ds_job *job, int sig);
/* Stops a drain that outlived [restart] drain_timeout. */
void ds_job_check_drain(ds_job *job);
/* The step the ranks drained at (from rank 0), or -1. */
long long ds_job_drain_step(const ds_job *job);

/* Reads the ranks' progress reports (rank_progress.c): notes where they resumed, and stops
 * the job as hung when a rank's step has not moved for [restart] hang_timeout. */
void ds_job_check_progress(ds_job *job);
/* Notes in launcher.log where the attempt's ranks said they resumed (once). */
void ds_job_note_resumed(ds_job *job);
/* How often ranks report progress for spec's hang_timeout (0: they do not). */
int ds_rank_progress_interval_ms(const ds_jobspec *spec);

/* Marks node n failed for why (once), with the time it was noticed. */
void ds_job_node_failed(ds_job *job, ds_node *n, const char *why);

/* 1 when every rank of the attempt exited 0 and nothing else went wrong. */
int ds_job_attempt_ok(const ds_job *job);
/* After a failed attempt: fills job->root (failure.h) from what the ranks and nodes
 * reported. */
void ds_job_find_root(ds_job *job);
/* Says on stderr (and in launcher.log) how many bytes of each rank's logs did not reach
 * their files in this attempt (a full disk); returns the total, 0 when none. */
long long ds_job_report_lost_logs(const ds_job *job);
/* Prints a failed attempt's ranks on stderr (each one's result, root cause and
 * consequences), the last lines of the root cause's stderr and where the logs are. */
void ds_job_report_attempt(const ds_job *job);

/* The job's monitor, one per attempt, opened in the attempt's directory (job->monitor),
 * and its end (final rows and report) once every node of the attempt is done (monitor_job.c). */
int ds_job_monitor_open(ds_job *job, ds_err *err);
void ds_job_monitor_end(ds_job *job);

#endif
