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

typedef struct ds_env_var {
    char *key, *value;
} ds_env_var;

typedef struct ds_jobspec {
    char *path; /* the file it came from (for messages) */

    /* [job] */
    char *name;    /* required; [A-Za-z0-9._-]+, used in log paths */
    char *script;  /* required; path of the Lua script (relative to workdir) */
    char **args;   /* `args`, split shell-style (quotes honoured), NULL-terminated */
    int nargs;
    char *workdir; /* default: the job spec's directory; always absolute after loading */
    char *dsrun;   /* absolute path of dsrun on the nodes; default: the dsrun beside the
                      running executable (bin/dsrun, or build/runtime/dsrun from
                      build/launcher/), resolved through /proc/self/exe */

    /* [resources] (command-line options override) */
    char *hostfile; /* NULL: the local node */
    char *include, *exclude;
    int num_nodes; /* -1: all */
    int num_gpus;  /* -1: all slots */
    ds_device device; /* key `device`: auto | cpu | cuda; default auto */
    ds_host_source host_source; /* key `source`: auto | hostfile | slurm | local; default auto */

    /* [launch] */
    ds_launch_method launch_method; /* key `method`: auto | ssh | srun | local; default auto */

    /* [ssh] */
    char *ssh_user;            /* default: $USER */
    int ssh_port;              /* default 22 */
    char *ssh_identity;        /* default: ssh-agent, then ~/.ssh/id_ed25519 */
    char *ssh_known_hosts;     /* default ~/.ssh/known_hosts */
    ds_hostkey_check host_key_check; /* default yes */
    int ssh_connect_timeout_ms;      /* key connect_timeout in seconds; default 10 s */
    int ssh_force;             /* key `force`: start even the local node over SSH */

    /* [env] any KEY = value, passed to every rank */
    ds_env_var *env;
    int nenv;

    /* [rendezvous] */
    char *rdzv_addr;  /* address the store binds to and ranks reach; default: first node's */
    int rdzv_port;    /* 0 = pick a free port; default 0 */
    int rdzv_timeout_ms; /* key timeout in seconds; default 300 s */
    int master_port;  /* key master_port: MASTER_PORT given to ranks; default 29500 */

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
} ds_jobspec;

/* Defaults for every key (no file). */
void ds_jobspec_init(ds_jobspec *spec);
/* Parses and validates path into spec (which it initialises). On error returns -1 with
 * "FILE:LINE: [section] key: what was wrong, what was expected" in err. */
int ds_jobspec_load(ds_jobspec *spec, const char *path, ds_err *err);
/* Same from a string (fuzzers, tests); name is used in messages. */
int ds_jobspec_parse(ds_jobspec *spec, const char *name, const char *text, ds_err *err);
void ds_jobspec_free(ds_jobspec *spec);

/* `tee` values: "all", "none", or a list of ranks and ranges ("0,2-3"). */
int ds_tee_check(const char *tee, ds_err *err);
/* 1 when rank r is shown on the terminal under tee (which passed ds_tee_check). */
int ds_tee_selects(const char *tee, int r);

/* Environment names the plan sets for every rank (and DS_RDZV and DS_STORE_TOKEN, which
 * the controller sets): [env] may not override them. 1 when name is one of them. */
int ds_env_reserved(const char *name);

#endif
