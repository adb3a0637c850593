#include "replan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_excluded(const char *host, char *const *excluded, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(host, excluded[i])) return 1;
    return 0;
}

static int push_host(ds_hostlist *hl, const char *name, const int *slots, int nkept, int spare) {
    ds_host *h = &hl->hosts[hl->nhosts];
    memset(h, 0, sizeof *h);
    h->name = strdup(name);
    h->slots = malloc((size_t)(nkept ? nkept : 1) * sizeof *h->slots);
    if (!h->name || !h->slots) {
        free(h->name);
        free(h->slots);
        return -1;
    }
    memcpy(h->slots, slots, (size_t)nkept * sizeof *slots);
    h->nkept = nkept;
    for (int i = 0; i < nkept; i++)
        if (slots[i] + 1 > h->nslots) h->nslots = slots[i] + 1;
    h->spare = spare;
    hl->nhosts++;
    return 0;
}

static void say(char *what, size_t cap, const char *fmt, const char *a, const char *b) {
    size_t len = strlen(what);
    if (len + 2 < cap) snprintf(what + len, cap - len, fmt, a, b);
}

int ds_replan(ds_plan *out, const ds_plan *cur, char *const *excluded, int nexcluded, int min_nodes,
              char *what, size_t cap, ds_err *err) {
    ds_hostlist hl = {0};
    char *used = calloc((size_t)cur->spares.nhosts + 1, 1);
    hl.hosts = calloc((size_t)(cur->nnodes + cur->spares.nhosts), sizeof *hl.hosts);
    int rc = -1, kept = 0;
    if (!used || !hl.hosts) goto oom;
    for (int i = 0; i < cur->nnodes; i++) {
        const ds_plan_node *n = &cur->nodes[i];
        if (!is_excluded(n->host, excluded, nexcluded)) {
            /* by its hostfile name: the caller resolves ssh_config aliases again */
            if (push_host(&hl, n->alias ? n->alias : n->host, n->slots, n->nslots, 0) != 0) goto oom;
            kept++;
            continue;
        }
        int s = -1;
        for (int k = 0; k < cur->spares.nhosts && s < 0; k++) {
            const ds_host *sp = &cur->spares.hosts[k];
            if (!used[k] && sp->nkept >= n->nslots && !is_excluded(sp->name, excluded, nexcluded)) s = k;
        }
        if (s < 0) {
            say(what, cap, "node %s dropped (no spare left)%s\n", n->host, "");
            continue;
        }
        used[s] = 1;
        const ds_host *sp = &cur->spares.hosts[s];
        if (push_host(&hl, sp->name, sp->slots, n->nslots, 0) != 0) goto oom;
        kept++;
        say(what, cap, "node %s replaced by spare %s\n", n->host, sp->name);
    }
    if (kept < cur->nnodes && (min_nodes <= 0 || kept < min_nodes)) {
        if (min_nodes <= 0)
            ds_err_set(err, "no spare left to replace an excluded node, and [restart] min_nodes is not set "
                            "(the job would have to shrink from %d to %d nodes)", cur->nnodes, kept);
        else
            ds_err_set(err, "only %d node%s left, below [restart] min_nodes = %d", kept, kept == 1 ? "" : "s",
                       min_nodes);
        goto done;
    }
    for (int k = 0; k < cur->spares.nhosts; k++) {
        const ds_host *sp = &cur->spares.hosts[k];
        if (!used[k] && !is_excluded(sp->name, excluded, nexcluded) && push_host(&hl, sp->name, sp->slots, sp->nkept, 1) != 0)
            goto oom;
    }
    ds_jobspec none = {.device = cur->gpus ? DS_DEVICE_CUDA : DS_DEVICE_CPU}; /* spares marked, none held back */
    /* MASTER_ADDR that was node 0's follows node 0 (a program's rendezvous is there) */
    const char *master = strcmp(cur->master_addr, cur->nodes[0].host) ? cur->master_addr : NULL;
    rc = ds_plan_build(out, &hl, &none, master, cur->master_port, err);
    goto done;
oom:
    ds_err_set(err, "out of memory");
done:
    free(used);
    ds_hostlist_free(&hl);
    return rc;
}
