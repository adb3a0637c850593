/* cli: see cli.h. A small hand-written parser instead of getopt_long: no global state,
 * so tests can call it repeatedly, and the messages name the option. */
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char DS_CLI_USAGE[] = "usage: dslaunch [options] JOB.ini [-- ARGS...]\n"
                           "       dslaunch [options] PROGRAM [ARGS...]";

const char DS_CLI_HELP[] =
    "usage: dslaunch [options] JOB.ini [-- ARGS...]\n"
    "       dslaunch [options] PROGRAM [ARGS...]\n"
    "\n"
    "Runs the job JOB.ini describes, or PROGRAM as every rank, on the hosts of a hostfile\n"
    "(or on this node). A Lua PROGRAM (*.lua) runs in dsrun's engine; any other runs as a\n"
    "process per rank with torchrun's environment (docs/running.md). Everything after\n"
    "PROGRAM, or after `--` following JOB.ini, is the program's arguments. Options\n"
    "override the job spec's keys (docs/jobspec.md).\n"
    "\n"
    "  -H, --hostfile FILE     hostfile: `host slots=N` per line (docs/hostfile.md)\n"
    "  -i, --include SPEC      use only these hosts/slots, e.g. host1@host2:0,2\n"
    "  -e, --exclude SPEC      use all but these hosts/slots\n"
    "      --num_nodes N       use the first N hosts\n"
    "      --num_gpus N        use the first N slots of each host\n"
    "      --master_addr ADDR  MASTER_ADDR given to ranks (default: the first host)\n"
    "      --master_port PORT  MASTER_PORT (default: one checked free on node 0)\n"
    "      --tee RANKS         ranks shown on the terminal: all, none, or 0,2-3\n"
    "      --log_dir DIR       where rank logs go (default: logs/ in the workdir)\n"
    "      --force_ssh         start even this node's ranks over SSH\n"
    "      --local_rank_arg    give a program --local_rank=N, as deepspeed does\n"
    "      --deepspeed_config FILE  apply a DeepSpeed JSON config to [engine]\n"
    "                          (docs/from-deepspeed.md)\n"
    "      --set S.KEY=VALUE   set any job spec key, e.g. --set engine.zero_stage=2\n"
    "      --export VAR[,VAR]  give every rank these variables of this environment\n"
    "      --dry-run           print the plan as JSON (docs/plan.md) and start nothing\n"
    "      --plan-memory       print each rank's predicted memory (docs/memory.md), start nothing;\n"
    "                          with --all every choice that matters and the fastest that fits\n"
    "      --no-plan-check     launch even when the memory plan predicts the job does not fit\n"
    "  -h, --help              this text\n"
    "  -V, --version           the version\n"
    "\n"
    "Exit status (docs/operations.md):\n"
    "  0    every rank exited 0\n"
    "  1    the job failed, after [restart] max_restarts restarts\n"
    "  2    a user error: usage, job spec, hostfile, or a script that cannot be loaded\n"
    "  3    drained on TERM/USR1/USR2 ([restart] drain_signals): every rank saved a\n"
    "       checkpoint at the same step; run the same command to resume (requeue)\n"
    "  4    every rank exited 0, but logs were lost (a full disk): the summary says how much\n"
    "  128+N  interrupted by signal N (130: Ctrl-C), or a second signal during a drain\n";

typedef enum { O_STR, O_INT, O_FLAG, O_SET, O_EXPORT } opt_kind;

typedef struct opt {
    const char *lng;
    char shrt;
    opt_kind kind;
    size_t off;
    int lo, hi;
} opt;

#define F(f) offsetof(ds_cli, f)
static const opt OPTS[] = {
    {"hostfile", 'H', O_STR, F(hostfile), 0, 0},
    {"include", 'i', O_STR, F(include), 0, 0},
    {"exclude", 'e', O_STR, F(exclude), 0, 0},
    {"num_nodes", 0, O_INT, F(num_nodes), 1, 100000},
    {"num_gpus", 0, O_INT, F(num_gpus), 1, 4096},
    {"num_accelerators", 0, O_INT, F(num_gpus), 1, 4096},
    {"master_addr", 0, O_STR, F(master_addr), 0, 0},
    {"master_port", 0, O_INT, F(master_port), 1, 65535},
    {"tee", 0, O_STR, F(tee), 0, 0},
    {"log_dir", 0, O_STR, F(log_dir), 0, 0},
    {"force_ssh", 0, O_FLAG, F(force_ssh), 0, 0},
    {"local_rank_arg", 0, O_FLAG, F(local_rank_arg), 0, 0},
    {"deepspeed_config", 0, O_STR, F(deepspeed_config), 0, 0},
    {"set", 0, O_SET, F(sets), 0, 0},
    {"export", 0, O_EXPORT, F(exports), 0, 0},
    {"dry-run", 0, O_FLAG, F(dry_run), 0, 0},
    {"dry_run", 0, O_FLAG, F(dry_run), 0, 0},
    {"plan-memory", 0, O_FLAG, F(plan_memory), 0, 0},
    {"all", 0, O_FLAG, F(plan_all), 0, 0},
    {"no-plan-check", 0, O_FLAG, F(no_plan_check), 0, 0},
    {"help", 'h', O_FLAG, F(help), 0, 0},
    {"version", 'V', O_FLAG, F(version), 0, 0},
};
#undef F
#define NOPTS ((int)(sizeof OPTS / sizeof OPTS[0]))

static int set_opt(ds_cli *cli, const opt *o, const char *name, const char *value, ds_err *err) {
    char *field = (char *)cli + o->off;
    if (o->kind == O_STR) {
        if (!*value) return ds_err_set(err, "%s: empty value", name);
        *(const char **)field = value;
        return 0;
    }
    if (o->kind == O_SET || o->kind == O_EXPORT) {
        int *n = o->kind == O_SET ? &cli->nsets : &cli->nexports;
        if (!*value) return ds_err_set(err, "%s: empty value", name);
        if (*n == DS_CLI_MAX_LIST) return ds_err_set(err, "%s: given more than %d times", name, DS_CLI_MAX_LIST);
        ((const char **)field)[(*n)++] = value;
        return 0;
    }
    char *end;
    long v = strtol(value, &end, 10);
    if (end == value || *end || value[0] == ' ' || value[0] == '+')
        return ds_err_set(err, "%s '%s': expected an integer", name, value);
    if (v < o->lo || v > o->hi)
        return ds_err_set(err, "%s %s: expected %d..%d", name, value, o->lo, o->hi);
    *(int *)field = (int)v;
    return 0;
}

static int is_spec(const char *a) {
    size_t n = strlen(a);
    return n > 4 && !strcmp(a + n - 4, ".ini");
}

/* A positional argument at argv[i]: the spec or the program, or what follows them.
 * Returns 1 when it ends the parse (the rest is the program's), 0 to go on, -1 error. */
static int positional(ds_cli *cli, int argc, char **argv, int i, int after_dashes, ds_err *err) {
    const char *a = argv[i];
    if (!cli->job && !cli->program) {
        if (is_spec(a)) {
            cli->job = a;
            return 0;
        }
        cli->program = a;
        cli->args = argv + i + 1;
        cli->nargs = argc - i - 1;
        return 1;
    }
    if (after_dashes) {
        cli->args = argv + i;
        cli->nargs = argc - i;
        return 1;
    }
    if (is_spec(a)) return ds_err_set(err, "'%s': only one job spec may be given", a);
    return ds_err_set(err, "'%s': with a job spec, the program's arguments come after `--` "
                           "(dslaunch [options] %s -- ARGS...)", a, cli->job);
}

int ds_cli_parse(ds_cli *cli, int argc, char **argv, ds_err *err) {
    memset(cli, 0, sizeof *cli);
    cli->num_nodes = cli->num_gpus = -1;
    int only_positional = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || !strcmp(a, "-")) {
            int rc = positional(cli, argc, argv, i, only_positional, err);
            if (rc < 0) return -1;
            if (rc > 0) break;
            continue;
        }
        if (!strcmp(a, "--")) {
            if (cli->job) { /* `JOB.ini --`: all that follows is the program's (maybe none) */
                cli->args = argv + i + 1;
                cli->nargs = argc - i - 1;
                break;
            }
            only_positional = 1;
            continue;
        }
        const opt *o = NULL;
        const char *value = NULL, *name = a;
        char optname[64];
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t n = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            for (int k = 0; k < NOPTS && !o; k++)
                if (strlen(OPTS[k].lng) == n && !strncmp(OPTS[k].lng, a + 2, n)) o = &OPTS[k];
            snprintf(optname, sizeof optname, "--%.*s", (int)(n > 40 ? 40 : n), a + 2);
            name = optname;
            if (eq) value = eq + 1;
        } else {
            for (int k = 0; k < NOPTS && !o; k++)
                if (OPTS[k].shrt && OPTS[k].shrt == a[1]) o = &OPTS[k];
            snprintf(optname, sizeof optname, "-%c", a[1]);
            name = optname;
            if (o && a[2]) value = a + 2; /* -Hfile */
        }
        if (!o) return ds_err_set(err, "unknown option '%s'", a);
        if (o->kind == O_FLAG) {
            if (value) return ds_err_set(err, "%s takes no value", name);
            *(int *)((char *)cli + o->off) = 1;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) return ds_err_set(err, "%s needs a value", name);
            value = argv[++i];
        }
        if (set_opt(cli, o, name, value, err) != 0) return -1;
    }
    if (cli->help || cli->version) return 0;
    if (!cli->job && !cli->program) return ds_err_set(err, "no job spec or program given");
    if (cli->tee && ds_tee_check(cli->tee, err) != 0) return ds_err_prefix(err, "--tee");
    return 0;
}

/* path as given when absolute, else made absolute from the current directory */
static char *abs_path(const char *path) {
    if (path[0] == '/') return strdup(path);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return strdup(path);
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", cwd, path);
    return p;
}

static void set_null(char **field) {
    free(*field);
    *field = NULL;
}

static int replace(char **field, char *value, ds_err *err) {
    if (!value) return ds_err_set(err, "out of memory");
    free(*field);
    *field = value;
    return 0;
}

/* A job named after its program ("train" for dir/train.py): the name's characters are
 * [A-Za-z0-9._-] (others become '_'), at most 64 of them. */
static char *name_of(const char *program) {
    const char *base = strrchr(program, '/');
    base = base && base[1] ? base + 1 : program;
    size_t n = strcspn(base + (base[0] == '.'), ".") + (base[0] == '.');
    if (n > 64) n = 64;
    char *name = malloc(n + 4);
    if (!name) return NULL;
    for (size_t i = 0; i < n; i++) {
        char c = base[i];
        name[i] = isalnum((unsigned char)c) || c == '.' || c == '_' || c == '-' ? c : '_';
    }
    name[n] = '\0';
    if (n == 0) strcpy(name, "job");
    return name;
}

/* No job spec: the defaults of every key, the program's name, this directory. */
static int program_job(const ds_cli *cli, ds_jobspec *spec, ds_err *err) {
    ds_jobspec_init(spec);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) {
        ds_jobspec_free(spec);
        return ds_err_errno(err, errno, "the current directory");
    }
    spec->name = name_of(cli->program);
    spec->script = strdup(cli->program);
    spec->workdir = strdup(cwd);
    if (!spec->name || !spec->script || !spec->workdir || !spec->args) {
        ds_jobspec_free(spec);
        return ds_err_set(err, "out of memory");
    }
    return 0;
}

static int replace_args(ds_jobspec *spec, char *const *args, int nargs, ds_err *err) {
    char **v = calloc((size_t)nargs + 1, sizeof *v);
    int ok = v != NULL;
    for (int i = 0; ok && i < nargs; i++) ok = (v[i] = strdup(args[i])) != NULL;
    if (!ok) {
        for (int i = 0; v && i < nargs; i++) free(v[i]);
        free(v);
        return ds_err_set(err, "out of memory");
    }
    for (int i = 0; i < spec->nargs; i++) free(spec->args[i]);
    free(spec->args);
    spec->args = v;
    spec->nargs = nargs;
    return 0;
}

int ds_cli_job(const ds_cli *cli, ds_jobspec *spec, ds_err *err) {
    if (cli->job ? ds_jobspec_load(spec, cli->job, err) : program_job(cli, spec, err)) return -1;
    if (ds_jobspec_override(spec, cli->sets, cli->nsets, err) != 0 ||
        (cli->args && replace_args(spec, cli->args, cli->nargs, err) != 0) ||
        ds_cli_apply(cli, spec, err) != 0) {
        ds_jobspec_free(spec);
        return -1;
    }
    return 0;
}

int ds_cli_apply(const ds_cli *cli, ds_jobspec *spec, ds_err *err) {
    if (cli->hostfile && replace(&spec->hostfile, abs_path(cli->hostfile), err)) return -1;
    /* The resource selection is overridden as a whole: a --include on the command line
     * replaces the spec's num_gpus rather than clashing with it, and vice versa. Without
     * a hostfile the spec's num_gpus also says how many CPU slots this node has, which
     * the selection does not change. */
    if (spec->local_slots == -1) spec->local_slots = spec->num_gpus;
    if (cli->include || cli->exclude) {
        set_null(&spec->include);
        set_null(&spec->exclude);
        spec->num_nodes = spec->num_gpus = -1;
    }
    if (cli->num_nodes != -1 || cli->num_gpus != -1) {
        set_null(&spec->include);
        set_null(&spec->exclude);
    }
    if (cli->include && replace(&spec->include, strdup(cli->include), err)) return -1;
    if (cli->exclude && replace(&spec->exclude, strdup(cli->exclude), err)) return -1;
    if (cli->num_nodes != -1) spec->num_nodes = cli->num_nodes;
    if (cli->num_gpus != -1) spec->num_gpus = cli->num_gpus;
    if (cli->master_addr && replace(&spec->rdzv_addr, strdup(cli->master_addr), err)) return -1;
    if (cli->master_port) spec->master_port = cli->master_port;
    if (cli->tee && replace(&spec->tee, strdup(cli->tee), err)) return -1;
    if (cli->log_dir && replace(&spec->log_dir, abs_path(cli->log_dir), err)) return -1;
    if (cli->force_ssh) spec->ssh_force = 1;
    if (cli->local_rank_arg) spec->local_rank_arg = 1;
    if (cli->deepspeed_config && replace(&spec->deepspeed_config, abs_path(cli->deepspeed_config), err))
        return -1;
    return 0;
}
