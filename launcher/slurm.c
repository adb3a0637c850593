/* slurm: see slurm.h and docs/slurm.md. */
#include "slurm.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_hostname.h"
#include "slurm_hostlist.h"

#define MAX_NODES 100000 /* as [resources] num_nodes */
#define MAX_SLOTS 4096   /* as a hostfile's slots=N */

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int ds_slurm_require_allocation(const char *what, ds_err *err) {
    if (env("SLURM_JOB_ID")) return 0;
    return ds_err_set(err, "%s, but this is not inside a Slurm allocation (SLURM_JOB_ID is not set): run "
                           "dslaunch under salloc or in an sbatch script", what);
}

int ds_hosts_source_resolve(ds_jobspec *spec, ds_err *err) {
    switch (spec->host_source) {
    case DS_HOSTS_AUTO:
        spec->host_source = spec->hostfile ? DS_HOSTS_HOSTFILE : env("SLURM_JOB_ID") ? DS_HOSTS_SLURM : DS_HOSTS_LOCAL;
        return 0;
    case DS_HOSTS_HOSTFILE:
        if (!spec->hostfile) return ds_err_set(err, "[resources] source = hostfile, but no hostfile is given");
        return 0;
    case DS_HOSTS_SLURM:
        if (spec->hostfile)
            return ds_err_set(err, "[resources] source = slurm, but a hostfile is given too: give one of them");
        return ds_slurm_require_allocation("[resources] source = slurm", err);
    case DS_HOSTS_LOCAL:
        if (spec->hostfile)
            return ds_err_set(err, "[resources] source = local, but a hostfile is given too: give one of them");
        return 0;
    }
    return ds_err_set(err, "internal: unknown host source %d", (int)spec->host_source);
}

const char *ds_slurm_store_addr(void) {
    static char host[256];
    const char *node = env("SLURMD_NODENAME");
    if (node) return node;
    return ds_hostname(host, sizeof host, "localhost");
}

/* A decimal in [lo, hi] spanning exactly [s, s+len); -1 when it is not one. */
static long number(const char *s, size_t len, long lo, long hi) {
    if (len == 0 || len > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v < lo || v > hi ? -1 : v;
}

int ds_slurm_counts_expand(const char *s, int max, int **v, int *n, ds_err *err) {
    *v = NULL;
    *n = 0;
    int cap = 0;
    const char *p = s;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *paren = memchr(p, '(', len);
        long count = number(p, paren ? (size_t)(paren - p) : len, 0, INT_MAX), times = 1;
        if (paren) {
            /* "N(xM)" */
            size_t rest = len - (size_t)(paren - p);
            times = rest > 3 && paren[1] == 'x' && paren[rest - 1] == ')' ? number(paren + 2, rest - 3, 1, INT_MAX) : -1;
        }
        if (count < 0 || times < 0) {
            free(*v);
            *v = NULL;
            *n = 0;
            return ds_err_set(err, "'%.200s': '%.*s' is not a count (expected N or N(xM))", s, (int)(len > 40 ? 40 : len), p);
        }
        if (times > max - *n) {
            free(*v);
            *v = NULL;
            *n = 0;
            return ds_err_set(err, "'%.200s': more than %d entries", s, max);
        }
        if (*n + times > cap) {
            int ncap = *n + (int)times > 2 * cap ? *n + (int)times : 2 * cap;
            int *nv = realloc(*v, sizeof *nv * (size_t)ncap);
            if (!nv) {
                free(*v);
                *v = NULL;
                *n = 0;
                return ds_err_set(err, "out of memory");
            }
            *v = nv;
            cap = ncap;
        }
        for (long i = 0; i < times; i++) (*v)[(*n)++] = (int)count;
        p += len;
        if (*p == ',') p++;
    }
    if (*n == 0) return ds_err_set(err, "'%.200s': no counts", s);
    return 0;
}

/* The GPUs per node Slurm gave (0: none), and in *var the variable that said so. -1 when
 * that variable is malformed. */
static int slurm_gpus(const char **var, ds_err *err) {
    static const char *const VARS[] = {"SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_NODE"};
    for (int i = 0; i < 3; i++) {
        const char *v = env(VARS[i]);
        if (!v) continue;
        *var = VARS[i];
        long n = 0;
        if (i == 0) {
            n = number(v, strlen(v), 0, MAX_SLOTS);
        } else {
            /* a list: GPU indices ("0,1,3"), or counts with an optional type ("a100:2") */
            for (const char *p = v; n >= 0 && *p;) {
                size_t len = strcspn(p, ",");
                const char *colon = NULL;
                for (size_t k = 0; k < len; k++)
                    if (p[k] == ':') colon = p + k;
                long x = i == 1 ? (number(p, len, 0, MAX_SLOTS) >= 0 ? 1 : -1)
                         : colon ? number(colon + 1, len - (size_t)(colon + 1 - p), 0, MAX_SLOTS)
                                 : number(p, len, 0, MAX_SLOTS);
                n = x < 0 ? -1 : n + x;
                p += len;
                if (*p == ',') p++;
            }
        }
        if (n < 0 || n > MAX_SLOTS) return ds_err_set(err, "%s=%s: not a GPU count or list Slurm would write", VARS[i], v);
        return (int)n;
    }
    *var = NULL;
    return 0;
}

static int add_node(ds_hostlist *hl, char *name, int nslots, ds_err *err) {
    for (int i = 0; i < hl->nhosts; i++)
        if (!strcmp(hl->hosts[i].name, name)) {
            free(name);
            return ds_err_set(err, "node '%s' is listed twice", hl->hosts[i].name);
        }
    ds_host *h = &hl->hosts[hl->nhosts];
    memset(h, 0, sizeof *h);
    h->name = name;
    h->slots = malloc(sizeof *h->slots * (size_t)nslots);
    if (!h->slots) {
        free(name);
        return ds_err_set(err, "out of memory");
    }
    for (int s = 0; s < nslots; s++) h->slots[s] = s;
    h->nslots = h->nkept = nslots;
    hl->nhosts++;
    return 0;
}

/* Slots per node when they are CPUs: num_gpus when the spec gives it, else Slurm's tasks
 * per node. Fills per_node (nnodes entries) and describes the choice in what. */
static int cpu_slots(const ds_jobspec *spec, int nnodes, int *per_node, char *what, size_t cap, ds_err *err) {
    if (spec->num_gpus > 0) {
        for (int i = 0; i < nnodes; i++) per_node[i] = spec->num_gpus;
        snprintf(what, cap, "%d CPU slots per node from num_gpus", spec->num_gpus);
        return 0;
    }
    const char *tpn = env("SLURM_TASKS_PER_NODE");
    if (!tpn) {
        for (int i = 0; i < nnodes; i++) per_node[i] = 1;
        snprintf(what, cap, "1 CPU slot per node (SLURM_TASKS_PER_NODE is not set)");
        return 0;
    }
    int *v, n;
    if (ds_slurm_counts_expand(tpn, MAX_NODES, &v, &n, err) != 0) return ds_err_prefix(err, "SLURM_TASKS_PER_NODE");
    int rc = 0;
    if (n != nnodes)
        rc = ds_err_set(err, "SLURM_TASKS_PER_NODE=%s gives %d node%s, SLURM_JOB_NODELIST %d (is dslaunch "
                             "running inside a job step? run it from the batch script or salloc's shell)",
                        tpn, n, n == 1 ? "" : "s", nnodes);
    for (int i = 0; rc == 0 && i < nnodes; i++) {
        if (v[i] < 1 || v[i] > MAX_SLOTS)
            rc = ds_err_set(err, "SLURM_TASKS_PER_NODE=%s: %d tasks on a node: expected 1..%d", tpn, v[i], MAX_SLOTS);
        per_node[i] = v[i];
    }
    free(v);
    snprintf(what, cap, "CPU slots from SLURM_TASKS_PER_NODE=%.100s", tpn);
    return rc;
}

int ds_slurm_hosts(ds_hostlist *hl, ds_jobspec *spec, char **from, ds_err *err) {
    memset(hl, 0, sizeof *hl);
    *from = NULL;
    const char *job = env("SLURM_JOB_ID");
    const char *var = env("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    const char *nodelist = env(var);
    if (!job || !nodelist)
        return ds_err_set(err, "inside a Slurm allocation, but %s is not set", job ? "SLURM_JOB_NODELIST" : "SLURM_JOB_ID");
    char **names;
    int nnames;
    if (ds_slurm_hostlist_expand(nodelist, MAX_NODES, &names, &nnames, err) != 0) return ds_err_prefix(err, "%s", var);
    const char *gpu_var;
    int ngpus = slurm_gpus(&gpu_var, err);
    int *per_node = calloc((size_t)nnames, sizeof *per_node);
    hl->hosts = calloc((size_t)nnames, sizeof *hl->hosts);
    char what[256];
    int rc = ngpus < 0 ? -1 : !per_node || !hl->hosts ? ds_err_set(err, "out of memory") : 0;
    if (rc == 0 && spec->device == DS_DEVICE_AUTO) spec->device = ngpus > 0 ? DS_DEVICE_CUDA : DS_DEVICE_CPU;
    if (rc == 0 && spec->device == DS_DEVICE_CUDA) {
        if (ngpus == 0)
            rc = ds_err_set(err, "[resources] device = cuda, but the Slurm allocation has no GPUs (none of "
                                 "SLURM_GPUS_ON_NODE, SLURM_JOB_GPUS, SLURM_GPUS_PER_NODE is set): ask for "
                                 "them with --gpus-per-node=N or --gres=gpu:N");
        for (int i = 0; i < nnames; i++) per_node[i] = ngpus;
        snprintf(what, sizeof what, "%d GPU slots per node from %s=%.100s", ngpus, gpu_var ? gpu_var : "?",
                 gpu_var ? getenv(gpu_var) : "");
    } else if (rc == 0) {
        rc = cpu_slots(spec, nnames, per_node, what, sizeof what, err);
    }
    int i = 0;
    for (; rc == 0 && i < nnames; i++) rc = add_node(hl, names[i], per_node[i], err);
    for (; i < nnames; i++) free(names[i]); /* the ones not handed to hl */
    free(names);
    free(per_node);
    if (rc == 0 && asprintf(from, "slurm job %s: %s=%.200s; %s", job, var, nodelist, what) < 0) {
        *from = NULL;
        rc = ds_err_set(err, "out of memory");
    }
    if (rc != 0) ds_hostlist_free(hl);
    return rc;
}
