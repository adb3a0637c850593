/* The job spec: an INI file (read with inih) validated into a ds_jobspec. Every value is
 * checked; an unknown section or key, a wrong type, an out-of-range value or a missing
 * required key is an error naming file, line, key and what was expected.
 * docs/jobspec.md documents every key; keep the two in step. */
#ifndef DS_JOBSPEC_H
#define DS_JOBSPEC_H

#include "ds_err.h"
#include "engine_opts.h"

typedef enum { DS_HOSTKEY_YES, DS_HOSTKEY_ACCEPT_NEW, DS_HOSTKEY_NO } ds_hostkey_check;
/* What a slot is: auto = GPUs when the controller's node has CUDA devices, else CPUs
 * (main.c resolves auto before planning, so a plan only ever sees cpu or cuda). */
typedef enum { DS_DEVICE_AUTO, DS_DEVICE_CPU, DS_DEVICE_CUDA } ds_device;
/* Where the hosts come from, and how each node's agent is started (docs/slurm.md). main.c
 * resolves auto before planning: a plan only ever sees the others. */
typedef enum { DS_HOSTS_AUTO, DS_HOSTS_HOSTFILE, DS_HOSTS_SLURM, DS_HOSTS_LOCAL } ds_host_source;
typedef enum { DS_LAUNCH_AUTO, DS_LAUNCH_SSH, DS_LAUNCH_SRUN, DS_LAUNCH_LOCAL } ds_launch_method;

/* [monitor] outputs, as bits of ds_jobspec.monitor_outputs (launcher/monitor.h). */
enum {
    DS_MONITOR_JSONL = 1,       /* metrics.jsonl */
    DS_MONITOR_TENSORBOARD = 2, /* events.out.tfevents.* */
    DS_MONITOR_REPORT = 4,      /* report.html */
    DS_MONITOR_PROGRESS = 8,    /* the progress line on the terminal */
};

typedef struct ds_env_var {
    char *key, *value;
} ds_env_var;

typedef struct ds_jobspec {
    char *path; /* the file it came from (for messages) */

    /* [job] */
    char *name;    /* required; [A-Za-z0-9._-]+, used in log paths */
    char *script;  /* required (or `command`): the program every rank runs, relative to
                      workdir; a Lua script (*.lua) runs in dsrun, anything else as a process
                      (`command` sets script and args from one word list) */
    char **args;   /* `args`, split shell-style (quotes honoured), NULL-terminated */
    int nargs;
    char **interpreter; /* `interpreter`, split like args; NULL: the program's #! line */
    int ninterp;
    int local_rank_arg; /* key local_rank_arg: a program (not Lua) gets --local_rank=N after its
                           arguments, as DeepSpeed's launcher gives it; default false */
    char *workdir; /* default: the job spec's directory; always absolute after loading */
    char *dsrun;   /* absolute path of dsrun on the nodes; default: the dsrun beside the
                      running executable (bin/dsrun, or build/runtime/dsrun from
                      build/launcher/), resolved through /proc/self/exe */

    /* [resources] (command-line options override) */
    char *hostfile; /* NULL: the local node */
    char *include, *exclude;
    int num_nodes; /* -1: all */
    int num_gpus;  /* -1: all slots */
    int local_slots; /* no hostfile, CPU slots: how many this node has, num_gpus as the job
                        spec gave it (a command-line --include/--exclude drops num_gpus as a
                        filter, not as this node's size); -1: unset */
    ds_device device; /* key `device`: auto | cpu | cuda; default auto */
    ds_host_source host_source; /* key `source`: auto | hostfile | slurm | local; default auto */

    /* [launch] */
    ds_launch_method launch_method; /* key `method`: auto | ssh | srun | local; default auto */
    int max_handshakes;  /* [launch] max_handshakes: SSH openings in flight at once; default 64 */
    int relay_threshold; /* [launch] relay_threshold: relays start the nodes past this many (0: never); 256 */
    int relay_fanout;    /* [launch] relay_fanout: nodes per relay (0: about the square root of the nodes) */

    /* [ssh]: a key given here wins over the ssh configuration's value for the node (as an
     * ssh command-line option would); unset (NULL, 0, -1): the configuration's, else the
     * default (ssh_target.h) */
    char *ssh_user;            /* default: $USER */
    int ssh_port;              /* default 22 */
    char *ssh_identity;        /* default: ssh-agent, then ~/.ssh/id_ed25519 */
    char *ssh_known_hosts;     /* default ~/.ssh/known_hosts */
    int host_key_check;        /* a ds_hostkey_check; default yes */
    int ssh_connect_timeout_ms; /* key connect_timeout in seconds; default 10 s */
    char *ssh_config;          /* key `config`: default ~/.ssh/config (when it exists) */
    int ssh_force;             /* key `force`: start even the local node over SSH */

    /* [env] any KEY = value, passed to every rank */
    ds_env_var *env;
    int nenv;

    /* [rendezvous] */
    char *rdzv_addr;  /* address the store binds to and ranks reach; default: first node's */
    int rdzv_port;    /* 0 = pick a free port; default 0 */
    int rdzv_timeout_ms; /* key timeout in seconds; default 300 s */
    int master_port;  /* key master_port: MASTER_PORT given to ranks, checked free on rank
                         0's node when the job starts; default 0: any free port there */

    /* [restart] */
    int max_restarts;            /* default 0 */
    int spares;                  /* key spares: the last N hosts (after filtering) are
                                    held back as spares, besides those marked `spare`;
                                    default 0 */
    int heartbeat_interval_ms;   /* key heartbeat_interval (s); default 5 s */
    int heartbeat_timeout_ms;    /* key heartbeat_timeout (s); default 30 s */
    int node_retries;            /* key node_retries: a node that fails this many times is
                                    excluded for the rest of the job; default 2 */
    int min_nodes;               /* key min_nodes: with no spare left, continue on fewer nodes
                                    while at least this many remain; 0 (default) = never */
    int backoff_ms;              /* key backoff (s): wait before the first restart, doubled
                                    for each next one; default 1 s */
    int backoff_max_ms;          /* key backoff_max (s): the longest wait; default 60 s */
    int drain_signals;           /* key drain_signals: a mask of 1 << SIGxxx that drain the
                                    job (checkpoint, exit for requeue) instead of stopping
                                    it: "TERM, USR1, USR2" (default; any of TERM, HUP,
                                    USR1, USR2) or "none" */
    int drain_timeout_ms;        /* key drain_timeout (s): how long ranks may take to drain
                                    before they are stopped; default 120 s */
    int hang_timeout_ms;         /* key hang_timeout (s): a rank whose training step does not
                                    move for this long is stuck (the job is restarted);
                                    0 (default) = no hang detection */

    /* [notify] */
    char *webhook;      /* key webhook: http(s) URL events are POSTed to; NULL: none */
    int notify_timeout_ms; /* key timeout (s): per POST; default 5 s */

    /* [logs] */
    char *log_dir;   /* default "logs"; a relative path is relative to workdir (--log_dir
                        on the command line is made absolute from the current directory) */
    char *tee;       /* which ranks show on the terminal: "all" (default), "none", "0,2-3" */
    int log_mode;    /* key mode: octal, of the directories dslaunch creates for logs (files get
                        it without execute bits); default 0700: logs carry environments */

    /* [checkpoint] */
    int ckpt_mode;   /* key mode: octal, of the directories a checkpoint save creates (files
                        without execute bits), passed to ranks as DS_CKPT_MODE; default 0700 */

    /* [engine]: every rank's engine options (common/engine_opts.h has the keys, types,
     * ranges and defaults); a script may override the stage options per stage */
    ds_engine_opts engine;
    unsigned char engine_given[DS_EO_COUNT]; /* 1 for each option the file or a --set gave
                                                (a DeepSpeed config does not override those) */
    char *deepspeed_config; /* key deepspeed_config (relative to the spec's folder) or
                               --deepspeed_config: a DeepSpeed JSON config mapped onto the
                               options (launcher/ds_config.h); NULL: none */

    /* [monitor] (docs/monitoring.md) */
    int monitor_outputs;     /* key outputs: DS_MONITOR_* bits; default all four */
    int steps_per_print;     /* progress lines when not on a terminal, default 10 */
    int steps_per_print_given; /* 1 when the file or a --set gave it */
    int metrics_port;        /* Prometheus /metrics; -1 off (default), 0 any free port */
    char *metrics_addr;      /* the address it listens on; default 127.0.0.1 */
} ds_jobspec;

/* Defaults for every key (no file). */
void ds_jobspec_init(ds_jobspec *spec);
/* Parses and validates path into spec (which it initialises). On error returns -1 with
 * "FILE:LINE: [section] key: what was wrong, what was expected" in err. */
int ds_jobspec_load(ds_jobspec *spec, const char *path, ds_err *err);
/* Same from a string (fuzzers, tests); name is used in messages. */
int ds_jobspec_parse(ds_jobspec *spec, const char *name, const char *text, ds_err *err);
void ds_jobspec_free(ds_jobspec *spec);

/* Applies `--set SECTION.KEY=VALUE` overrides in order, each validated as a line of the
 * file would be (a key the file gave is replaced; relative paths are relative to the
 * current directory), then the checks across keys. Errors read "--set S.K=V: ...". */
int ds_jobspec_override(ds_jobspec *spec, const char *const *sets, int nsets, ds_err *err);

/* 1 when the job's program is a Lua script (runs in dsrun's engine, not as a process). */
int ds_jobspec_is_lua(const ds_jobspec *spec);

/* `tee` values: "all", "none", or a list of ranks and ranges ("0,2-3"). */
int ds_tee_check(const char *tee, ds_err *err);
/* 1 when rank r is shown on the terminal under tee (which passed ds_tee_check). */
int ds_tee_selects(const char *tee, int r);

/* Environment names the plan sets for every rank (and DS_RDZV and DS_STORE_TOKEN, which
 * the controller sets): [env] may not override them. 1 when name is one of them. */
int ds_env_reserved(const char *name);

#endif
