/* Where an invocation's logs go: every run of a job gets a directory of its own,
 * <logs.dir>/<name>/<run id>/ (run id: UTC start time and the job id's random part,
 * e.g. 20260102-113000-3f2a9c01, so they sort by time), holding launcher.log and one
 * attempt-K/ per attempt; <logs.dir>/<name>/latest points at the newest. Nothing an
 * earlier run wrote is ever replaced. */
#ifndef DS_RUN_DIR_H
#define DS_RUN_DIR_H

#include "ds_err.h"

/* mkdir -p with exactly mode (the umask aside) for the directories it creates; existing
 * ones are left alone. */
int ds_mkdir_p(const char *dir, int mode, ds_err *err);

/* Creates job_dir/<run id> (mode) and points job_dir/latest at it; *run_dir gets its
 * malloc'd path. suffix: the job id's random part. */
int ds_run_dir_create(const char *job_dir, const char *suffix, int mode, char **run_dir, ds_err *err);

#endif
