/* Starting every node's agent in one Slurm job step ([launch] method = srun,
 * docs/slurm.md): one
 *   srun --nodes=N --ntasks=N --ntasks-per-node=1 --nodelist=H1,H2,... --kill-on-bad-exit=1
 *        --overlap --input=all --label --mpi=none DSRUN agent --job ID --srun
 * whose stdin, the same for every agent of the step, carries only the controller's link
 * address and the job token. Each agent connects back and says which Slurm node it is
 * (JOIN, checked against the token); from then on its connection is that node's channel.
 *
 * A thread serves the step (srun_serve.c) and shows each node to node.c exactly as a
 * local agent looks: three pipes, so the controller's loop, supervision and reports need
 * nothing new. srun's output is labelled by task: a task's lines go to its node as the
 * agent's stderr, srun's own lines to the node they name (a node failure ends that node),
 * and everything to attempt-K/srun.log. No SSH is involved. */
#ifndef DS_SRUN_H
#define DS_SRUN_H

#include "agent_proto.h"
#include "ds_err.h"

struct ds_job;
struct ds_node;

/* Makes n one of the step's nodes (the step is created on the first call): n gets its
 * pipes and is STARTED; its agent starts when the step launches. */
int ds_srun_attach(struct ds_job *job, struct ds_node *n, ds_err *err);

/* Starts srun for every attached node, and the thread that serves it. When that is
 * impossible, every attached node ends with the reason as its agent's last words. */
void ds_srun_launch(struct ds_job *job);

/* An agent's SIGNAL frame: Slurm signals every process of the step, so every agent
 * reports the same signal; the first report of each signal counts. SIGUSR1/SIGUSR2 (a
 * warning before preemption or the time limit, sbatch --signal) are raised in the
 * controller itself, as if it had been signalled; TERM, INT, HUP stop the job, which
 * Slurm is ending. */
void ds_srun_on_signal(struct ds_job *job, struct ds_node *n, const ds_frame *f);

/* Ends the step: closes srun's stdin and every link, waits for srun (a few seconds),
 * then cancels the step (SIGTERM to srun) and at last kills srun. NULL step: nothing. */
void ds_srun_free(struct ds_job *job);

#endif
