/* The plan's hosts as SSH reaches them (plan.h): a hostfile name the ssh configuration
 * gives a HostName stands for that address, which is then the node's host (where the
 * store listens when it is node 0, what MASTER_ADDR names, what decides whether the node
 * is this one); the name stays as the node's alias, which SSH connects by. */
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "ssh_target.h"

static int resolve_node(ds_plan_node *n, const ds_ssh_config *cfg, ds_err *err) {
    char *host = ds_ssh_target_host(cfg, n->host, err);
    if (!host) return -1;
    if (!strcmp(host, n->host)) {
        free(host);
        return 0;
    }
    n->alias = n->host;
    n->host = host;
    n->local = ds_host_is_local(host);
    return 0;
}

int ds_plan_apply_ssh_config(ds_plan *plan, const ds_jobspec *spec, const ds_ssh_config *cfg,
                             int master_given, ds_err *err) {
    for (int i = 0; i < plan->nnodes; i++) {
        ds_plan_node *n = &plan->nodes[i];
        if (resolve_node(n, cfg, err) != 0) return -1;
        if (n->local && !spec->ssh_force) continue;
        /* everything about reaching the node is checked now, not when the job starts */
        ds_ssh_opts o;
        if (ds_ssh_target(spec, cfg, n->alias ? n->alias : n->host, &o, err) != 0) return -1;
        ds_ssh_opts_free(&o);
    }
    if (!master_given && plan->nnodes > 0 && strcmp(plan->master_addr, plan->nodes[0].host)) {
        char *addr = strdup(plan->nodes[0].host);
        if (!addr) return ds_err_set(err, "out of memory");
        free(plan->master_addr);
        plan->master_addr = addr;
    }
    return 0;
}
