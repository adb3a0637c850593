/* dslaunch: the controller's entry point. Command line -> job spec (+ overrides) ->
 * hosts (hostfile or this node) -> filters -> plan; then either print the plan
 * (--dry-run) or run it. Every error before the run exits 2 (DS_EXIT_USER_ERROR) and
 * leaves nothing behind. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "controller.h"
#include "ds_config.h"
#include "env_export.h"
#include "exit_codes.h"
#include "hostfile.h"
#include "jobspec.h"
#include "launch_method.h"
#include "plan.h"
#include "plan_memory.h"
#include "relay.h"
#include "slurm.h"
#include "ssh_target.h"
#include "ds_gpu.h"

extern char **environ;

static int local_gpu_count(void) { return ds_gpu_count(NULL, 0); }

/* The hosts to plan on: the Slurm allocation's, the hostfile's, or this node's slots (GPUs
 * when slots are GPUs). *from says which, in words. */
static int load_hosts(ds_hostlist *hl, ds_jobspec *spec, char **from, ds_err *err) {
    if (ds_hosts_source_resolve(spec, err) != 0) return -1;
    if (spec->host_source == DS_HOSTS_SLURM) return ds_slurm_hosts(hl, spec, from, err);
    if (asprintf(from, spec->hostfile ? "hostfile %s" : "this node", spec->hostfile) < 0) *from = NULL;
    int ngpus = spec->hostfile && spec->device != DS_DEVICE_AUTO ? 0 : local_gpu_count();
    if (spec->device == DS_DEVICE_AUTO) spec->device = ngpus > 0 ? DS_DEVICE_CUDA : DS_DEVICE_CPU;
    if (spec->hostfile) return ds_hostfile_load(hl, spec->hostfile, err);
    if (spec->device == DS_DEVICE_CUDA && ngpus == 0)
        return ds_err_set(err, "[resources] device = cuda, but this node has no CUDA device "
                               "(and no hostfile was given)");
    /* CPU slots: as many as the spec's num_gpus (or --num_gpus), and at least up to the
     * highest one an --include / --exclude names for localhost */
    int n = spec->num_gpus > 0 ? spec->num_gpus : spec->local_slots > 0 ? spec->local_slots : 1;
    const char *filter = spec->include ? spec->include : spec->exclude;
    if (filter && ds_filter_max_slot(filter, "localhost") >= n) n = ds_filter_max_slot(filter, "localhost") + 1;
    return ds_hostlist_local(hl, spec->device == DS_DEVICE_CUDA ? ngpus : 0, n, err);
}

/* The ranks run in workdir (and the logs go there by default): a missing one is an
 * error now, not a "cannot open" from every rank once they start. */
static int check_workdir(const ds_jobspec *spec, ds_err *err) {
    struct stat st;
    if (stat(spec->workdir, &st) != 0)
        return ds_err_errno(err, errno, "[job] workdir %s", spec->workdir);
    if (!S_ISDIR(st.st_mode)) return ds_err_set(err, "[job] workdir %s: not a directory", spec->workdir);
    return 0;
}

/* Hostfile names may be ~/.ssh/config aliases: the plan takes their HostNames. */
static int use_ssh_config(ds_plan *plan, const ds_jobspec *spec, int master_given, ds_err *err) {
    ds_ssh_config *cfg = ds_ssh_config_for(spec, err);
    if (!cfg) return -1;
    int rc = ds_plan_apply_ssh_config(plan, spec, cfg, master_given, err);
    const char *warnings = ds_ssh_config_warnings(cfg);
    for (const char *w = warnings; *w; w += strcspn(w, "\n") + 1)
        fprintf(stderr, "dslaunch: warning: %.*s\n", (int)strcspn(w, "\n"), w);
    ds_ssh_config_free(cfg);
    return rc;
}

static int plan_job(ds_plan *plan, ds_jobspec *spec, ds_err *err) {
    ds_hostlist hl = {0};
    char *from = NULL;
    if (load_hosts(&hl, spec, &from, err) != 0 ||
        ds_hostlist_filter(&hl, spec->include, spec->exclude, spec->num_nodes, spec->num_gpus,
                           err) != 0) {
        ds_hostlist_free(&hl);
        free(from);
        return -1;
    }
    /* one node and no address given: loopback, as DeepSpeed does; in an allocation, the
     * controller's own node (it may run on a login node, outside the allocation) */
    const char *addr = spec->rdzv_addr               ? spec->rdzv_addr
                       : spec->host_source == DS_HOSTS_SLURM ? ds_slurm_store_addr()
                       : spec->hostfile              ? NULL
                                                     : "127.0.0.1";
    int rc = ds_plan_build(plan, &hl, spec, addr, spec->master_port, err);
    ds_hostlist_free(&hl);
    if (rc != 0) {
        free(from);
        return -1;
    }
    plan->hosts_from = from;
    /* nodes SSH reaches: by ~/.ssh/config's names, and they must reach MASTER_ADDR */
    if (ds_launch_resolve(spec, plan, err) != 0 ||
        (spec->launch_method == DS_LAUNCH_SSH &&
         ((spec->hostfile && use_ssh_config(plan, spec, addr != NULL, err) != 0) ||
          ds_plan_check_master_addr(plan, err) != 0))) {
        ds_plan_free(plan);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    /* a relay, started by a controller (relay.h); not for users, so not in --help */
    if (argc >= 2 && !strcmp(argv[1], "--relay")) return ds_relay_main(); /* (--job ID: for ps) */
    ds_cli cli;
    ds_err err = {""};
    if (ds_cli_parse(&cli, argc, argv, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n%s\n(dslaunch --help lists the options)\n", err.msg,
                DS_CLI_USAGE);
        return DS_EXIT_USER_ERROR;
    }
    if (cli.plan_all && !cli.plan_memory) {
        fprintf(stderr, "dslaunch: --all goes with --plan-memory\n%s\n", DS_CLI_USAGE);
        return DS_EXIT_USER_ERROR;
    }
    if (cli.help) {
        fputs(DS_CLI_HELP, stdout);
        return 0;
    }
    if (cli.version) {
        printf("dslaunch %s\n", DS_VERSION);
        return 0;
    }
    ds_jobspec spec;
    if (ds_cli_job(&cli, &spec, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        return DS_EXIT_USER_ERROR;
    }
    ds_plan plan;
    if (check_workdir(&spec, &err) != 0 ||
        ds_env_collect(&spec, cli.exports, cli.nexports, environ, &err) != 0 ||
        plan_job(&plan, &spec, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        ds_jobspec_free(&spec);
        return DS_EXIT_USER_ERROR;
    }
    /* a DeepSpeed config's train_batch_size needs the world size: after planning */
    if (ds_dsconfig_use(&spec, plan.world_size, stderr, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        ds_plan_free(&plan);
        ds_jobspec_free(&spec);
        return DS_EXIT_USER_ERROR;
    }
    int rc = 0;
    if (cli.plan_memory) {
        rc = ds_plan_memory_print(&plan, &spec, cli.plan_all, &err);
        if (rc < 0) fprintf(stderr, "dslaunch: %s\n", err.msg), rc = 1;
    } else if (cli.dry_run) {
        /* a real run's DS_JOB_ID is chosen by the controller; the plan shows the name */
        ds_plan_write_json_spec(&plan, &spec, spec.name, 0, 1, stdout);
        if (fflush(stdout) != 0) rc = 1;
    } else if (!cli.no_plan_check && ds_plan_memory_check(&plan, &spec, &err) != 0) {
        fprintf(stderr, "dslaunch: %s\n", err.msg);
        rc = DS_EXIT_USER_ERROR;
    } else {
        rc = ds_controller_run(&spec, &plan);
    }
    ds_plan_free(&plan);
    ds_jobspec_free(&spec);
    return rc;
}
