/* dslaunch's exit status, one per way a job ends (docs/operations.md, --help). A
 * scheduler's wrapper can requeue on DS_EXIT_DRAINED and alert on the others. */
#ifndef DS_EXIT_CODES_H
#define DS_EXIT_CODES_H

#define DS_EXIT_OK 0          /* every rank exited 0 */
#define DS_EXIT_FAILED 1      /* the job failed, and no restart was left */
#define DS_EXIT_USER_ERROR 2  /* usage, job spec, hostfile, or a script that cannot be loaded */
#define DS_EXIT_DRAINED 3     /* drained on request: checkpoint saved; run the same command to resume */
#define DS_EXIT_LOGS_LOST 4   /* every rank exited 0, but some of their logs could not be written */
/* Interrupted by a signal that does not drain (or a second signal): 128 + its number. */
#define DS_EXIT_INTERRUPTED_BASE 128

#endif
