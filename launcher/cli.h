/* dslaunch's command line: DeepSpeed's launcher names for what they share
 * (--hostfile --include --exclude --num_nodes --num_gpus --master_addr --master_port),
 * plus our own. Options override the job spec's keys (ds_cli_apply). */
#ifndef DS_CLI_H
#define DS_CLI_H

#include "ds_err.h"
#include "jobspec.h"

typedef struct ds_cli {
    const char *job;       /* the job spec (the one positional argument) */
    const char *hostfile;  /* -H --hostfile */
    const char *include;   /* -i --include */
    const char *exclude;   /* -e --exclude */
    int num_nodes;         /* --num_nodes; -1 unset */
    int num_gpus;          /* --num_gpus (alias --num_accelerators); -1 unset */
    const char *master_addr;
    int master_port;       /* 0 unset */
    const char *tee;       /* --tee RANKS: overrides [logs] tee */
    const char *log_dir;   /* --log_dir DIR: overrides [logs] dir */
    int force_ssh;         /* --force_ssh: [ssh] force = true */
    int dry_run;
    int help, version;
} ds_cli;

/* Usage line and option list, for --help and usage errors. */
extern const char DS_CLI_USAGE[];
extern const char DS_CLI_HELP[];

/* Parses argv (options may come before or after the job spec; `--` ends options).
 * Returns 0, or -1 with a one-line message in err (a usage error: exit status 2). */
int ds_cli_parse(ds_cli *cli, int argc, char **argv, ds_err *err);

/* Applies the options to a loaded spec. Relative paths given on the command line are
 * relative to the current directory. Returns 0 or -1 (out of memory). */
int ds_cli_apply(const ds_cli *cli, ds_jobspec *spec, ds_err *err);

#endif
