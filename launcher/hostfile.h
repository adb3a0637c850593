/* Hostfiles in DeepSpeed's language (`host slots=N`, `#` comments, blank lines) and the
 * --include / --exclude / --num_nodes / --num_gpus filters, with DeepSpeed's semantics
 * and stricter errors where DeepSpeed is lax (docs/hostfile.md says where and why). */
#ifndef DS_HOSTFILE_H
#define DS_HOSTFILE_H

#include "ds_err.h"

typedef struct ds_host {
    char *name;
    int nslots;   /* slots the hostfile gives */
    int *slots;   /* slot indices kept (after filtering), ascending */
    int nkept;
    int spare;    /* marked as a spare for restarts (`spare` keyword on its line) */
    int line;     /* hostfile line, for messages */
} ds_host;

typedef struct ds_hostlist {
    ds_host *hosts; /* hostfile order = node-rank order */
    int nhosts;
} ds_hostlist;

/* Parses a hostfile. Errors name "FILE:LINE". */
int ds_hostfile_load(ds_hostlist *out, const char *path, ds_err *err);
int ds_hostfile_parse(ds_hostlist *out, const char *name, const char *text, ds_err *err);

/* Applies the filters in place (include/exclude may be NULL; num_nodes/num_gpus -1 =
 * unset). Hosts left with no slot are removed; a result with no slot is an error. */
int ds_hostlist_filter(ds_hostlist *hl, const char *include, const char *exclude,
                       int num_nodes, int num_gpus, ds_err *err);

/* No hostfile: the local node with as many slots as GPUs visible (CUDA_VISIBLE_DEVICES
 * respected), else num_gpus, else 1. ngpus_found is what the caller's device query saw. */
int ds_hostlist_local(ds_hostlist *out, int ngpus_found, int num_gpus, ds_err *err);

/* The highest slot a filter names for host ("a:1,3@b" names 1 and 3 of a), -1 if none. */
int ds_filter_max_slot(const char *filter, const char *host);

void ds_hostlist_free(ds_hostlist *hl);

#endif
