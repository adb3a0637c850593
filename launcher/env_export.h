/* The environment every rank gets beyond the plan's own variables, whichever node it is
 * on: lowest first, this environment's variables with DeepSpeed's prefixes (NCCL_,
 * PYTHON, UCX_, CUDA_, OMP_), the files ~/.deepspeed_env, ~/.dslaunch_env,
 * WORKDIR/.deepspeed_env and WORKDIR/.dslaunch_env, --export VAR[,VAR...], then the job
 * spec's [env] (and --set env.KEY=...). docs/running.md#environment. */
#ifndef DS_ENV_EXPORT_H
#define DS_ENV_EXPORT_H

#include "ds_err.h"
#include "jobspec.h"

/* Merges all of that into spec->env (a later source replaces an earlier one's value).
 * environ_ is the environment to take prefixed variables from (the process's own). A
 * line of a file that is not KEY=VALUE, a name dslaunch sets, or an --export of a
 * variable that is not set is an error naming the file and line or the option. */
int ds_env_collect(ds_jobspec *spec, const char *const *exports, int nexports, char *const *environ_,
                   ds_err *err);

#endif
