/* fd_budget.h */
#include "fd_budget.h"

#include <sys/resource.h>

static int per_node(int relayed) { return relayed ? DS_FDS_PER_RELAYED_NODE : DS_FDS_PER_NODE; }

long ds_fd_budget(int nnodes, int relayed) { return (long)nnodes * per_node(relayed) + DS_FDS_PER_JOB; }

int ds_fd_budget_fits(int nnodes, int relayed, long limit, ds_err *err) {
    long need = ds_fd_budget(nnodes, relayed);
    if (need <= limit) return 0;
    return ds_err_set(err, "%d nodes need about %ld open files in the controller (%d per node + %d), "
                           "but its limit is %ld: raise it (ulimit -n, or nofile in "
                           "/etc/security/limits.conf) to at least %ld",
                      nnodes, need, per_node(relayed), DS_FDS_PER_JOB, limit, need);
}

int ds_fd_budget_check(int nnodes, int relayed, ds_err *err) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0; /* cannot tell: go on */
    if (rl.rlim_cur < rl.rlim_max) {
        struct rlimit raised = {rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    long limit = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)1 << 30 ? 1L << 30 : (long)rl.rlim_cur;
    return ds_fd_budget_fits(nnodes, relayed, limit, err);
}
