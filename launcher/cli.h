/* dslaunch's command line: DeepSpeed's launcher names for what they share
 * (--hostfile --include --exclude --num_nodes --num_gpus --master_addr --master_port),
 * torchrun's shape (the program, then its arguments), plus our own. Options override
 * the job spec's keys (ds_cli_apply); --set overrides any of them. */
#ifndef DS_CLI_H
#define DS_CLI_H

#include "ds_err.h"
#include "jobspec.h"

/* Most --set / --export options one command line may give. */
#define DS_CLI_MAX_LIST 64

typedef struct ds_cli {
    const char *job;       /* the job spec: a first positional argument ending in .ini */
    const char *program;   /* or the program: any other first positional argument */
    char **args;           /* the program's arguments: all after the program, or all after
                              `--` following a spec (points into argv); NULL: none given */
    int nargs;
    const char *sets[DS_CLI_MAX_LIST];    /* --set SECTION.KEY=VALUE, in order */
    int nsets;
    const char *exports[DS_CLI_MAX_LIST]; /* --export VAR[,VAR...], as given */
    int nexports;
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
    int local_rank_arg;    /* --local_rank_arg: [job] local_rank_arg = true */
    const char *deepspeed_config; /* --deepspeed_config FILE: [engine] deepspeed_config */
    int dry_run;
    int plan_memory, plan_all; /* --plan-memory [--all] (launcher/plan_memory.h) */
    int no_plan_check;         /* --no-plan-check */
    int help, version;
} ds_cli;

/* Usage line and option list, for --help and usage errors. */
extern const char DS_CLI_USAGE[];
extern const char DS_CLI_HELP[];

/* Parses argv: `[options] JOB.ini [options] [-- ARGS...]` or `[options] PROGRAM
 * [ARGS...]` (everything after the program is its own). Returns 0, or -1 with a one-line
 * message in err (a usage error: exit status 2). */
int ds_cli_parse(ds_cli *cli, int argc, char **argv, ds_err *err);

/* The job as the command line gives it: the spec loaded (or, with a program and no spec,
 * one made from defaults: the program's name, the current directory as workdir), then
 * the --set overrides, the arguments, and the options (ds_cli_apply). Errors as the job
 * spec's (file:line, or "--set S.K=V: ..."). */
int ds_cli_job(const ds_cli *cli, ds_jobspec *spec, ds_err *err);

/* Applies the options to a loaded spec. Relative paths given on the command line are
 * relative to the current directory. Returns 0 or -1 (out of memory). */
int ds_cli_apply(const ds_cli *cli, ds_jobspec *spec, ds_err *err);

#endif
