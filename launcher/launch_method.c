/* launch_method: see launch_method.h. */
#include "launch_method.h"

#include <stdlib.h>
#include <string.h>

#include "slurm.h"

const char *ds_launch_name(ds_launch_method m) {
    static const char *const NAMES[] = {"auto", "ssh", "srun", "local"};
    return m >= DS_LAUNCH_AUTO && m <= DS_LAUNCH_LOCAL ? NAMES[m] : "?";
}

/* 1 when host is this machine: by name, as this node's name in the allocation, or as
 * any loopback address (127.0.0.0/8: a simulated cluster names its nodes 127.0.x.y). */
static int is_this_machine(const char *host) {
    const char *slurm_name = getenv("SLURMD_NODENAME");
    return ds_host_is_local(host) || !strncmp(host, "127.", 4) || (slurm_name && !strcmp(host, slurm_name));
}

int ds_launch_resolve(ds_jobspec *spec, ds_plan *plan, ds_err *err) {
    if (spec->launch_method == DS_LAUNCH_AUTO)
        spec->launch_method = spec->host_source == DS_HOSTS_SLURM ? DS_LAUNCH_SRUN : DS_LAUNCH_SSH;
    switch (spec->launch_method) {
    case DS_LAUNCH_SRUN:
        return ds_slurm_require_allocation("[launch] method = srun", err);
    case DS_LAUNCH_LOCAL:
        if (spec->ssh_force)
            return ds_err_set(err, "[launch] method = local and [ssh] force = true contradict each other");
        for (int i = 0; i < plan->nnodes; i++) {
            if (!is_this_machine(plan->nodes[i].host))
                return ds_err_set(err, "[launch] method = local, but node %d (%s) is not this machine",
                                  i, plan->nodes[i].host);
            plan->nodes[i].local = 1;
        }
        return 0;
    default:
        return 0;
    }
}
