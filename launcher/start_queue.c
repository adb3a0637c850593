/* start_queue.h */
#include "start_queue.h"

/* Over SSH (the node is not this machine, or [ssh] force), as start_node decides. */
static int via_ssh(const ds_job *job, const ds_node *n) {
    return job->spec->launch_method != DS_LAUNCH_SRUN && (!n->plan->local || job->spec->ssh_force);
}

static int in_flight(const ds_job *job) {
    int k = 0;
    for (int i = 0; i < job->plan->nnodes; i++) k += job->nodes[i].state == DS_NODE_CONNECTING;
    return k;
}

int ds_start_admit(ds_job *job, ds_node *n) {
    if (!via_ssh(job, n) || in_flight(job) < job->spec->max_handshakes) return 1;
    if (!job->nqueued++)
        ds_event(job->ev, "node %d (%s) and the next ones wait: %d SSH sessions opening at once ([launch] max_handshakes)",
                 n->plan->node_rank, n->plan->host, job->spec->max_handshakes);
    n->state = DS_NODE_QUEUED;
    return 0;
}

ds_node *ds_start_next(ds_job *job) {
    if (!job->nqueued) return NULL;
    ds_node *next = NULL;
    int k = in_flight(job);
    for (int i = 0; i < job->plan->nnodes; i++) {
        ds_node *n = &job->nodes[i];
        if (n->state != DS_NODE_QUEUED) continue;
        if (job->stopping) {
            n->state = DS_NODE_DONE; /* never started: nothing to stop */
            ds_node_wake(n);         /* (the loop counts it done) */
            job->nqueued--;
        } else if (!next && k < job->spec->max_handshakes) {
            next = n;
        }
    }
    if (next) job->nqueued--;
    return next;
}
