/* The `dsrun` subcommands; each lives with the part it belongs to and returns the
 * process exit status. */
#ifndef DS_SUBCOMMANDS_H
#define DS_SUBCOMMANDS_H

int dsrun_agent_main(int argc, char **argv);    /* agent/agent.c: one per node */
int dsrun_worker_main(int argc, char **argv);   /* worker/worker.c: one rank */
int dsrun_run_main(int argc, char **argv);      /* worker/run.c: one rank, no launcher */
int dsrun_tokenize_main(int argc, char **argv); /* data/tokenize.c */
int dsrun_ckpt_main(int argc, char **argv);     /* engine checkpoints: export, inspect */
int dsrun_plan_memory_main(int argc, char **argv); /* memplan/tool: the memory planner */

#endif
