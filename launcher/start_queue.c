/* start_queue.h */
#include "start_queue.h"

/* Over SSH (the node is not this machine, or [ssh] force), as start_node decides. */
static int via_ssh(const ds_job *job, const ds_node *n) {
    return job->spec->launch_method != DS_LAUNCH_SRUN && (!n->plan->local || job->spec->ssh_force);
}

int ds_start_admit(ds_job *job, ds_node *n, int in_flight) {
    if (!via_ssh(job, n) || in_flight < job->spec->max_handshakes) return 1;
    if (!job->nqueued++) {
        job->queue_at = (int)(n - job->nodes);
        ds_event(job->ev, "node %d (%s) and the next ones wait: %d SSH sessions opening at once ([launch] max_handshakes)",
                 n->plan->node_rank, n->plan->host, job->spec->max_handshakes);
    }
    n->state = DS_NODE_QUEUED;
    return 0;
}

ds_node *ds_start_next(ds_job *job, int in_flight) {
    if (!job->nqueued) return NULL;
    if (job->stopping) {
        for (int i = job->queue_at; i < job->plan->nnodes; i++) {
            ds_node *n = &job->nodes[i];
            if (n->state != DS_NODE_QUEUED) continue;
            n->state = DS_NODE_DONE; /* never started: nothing to stop */
            ds_node_wake(n);         /* (the loop counts it done) */
        }
        job->nqueued = 0;
        return NULL;
    }
    if (in_flight >= job->spec->max_handshakes) return NULL;
    /* (queued in their order, from queue_at: those before it started) */
    while (job->queue_at < job->plan->nnodes && job->nodes[job->queue_at].state != DS_NODE_QUEUED) job->queue_at++;
    if (job->queue_at == job->plan->nnodes) return NULL;
    job->nqueued--;
    return &job->nodes[job->queue_at++];
}
