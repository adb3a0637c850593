/* PyTorch's error file (TORCHELASTIC_ERROR_FILE) for a program rank, turned into the
 * failure record a Lua rank writes itself (runtime/worker/failure_record.h): see
 * error_file.c. */
#ifndef DS_ERROR_FILE_H
#define DS_ERROR_FILE_H

#include "ds_buf.h"
#include "ds_err.h"

/* A fresh directory for the node's error files under $TMPDIR (or /tmp), named after the
 * job and the agent (dsrun-errors-JOB-HOST-PID-XXXXXX), in *dir, and *lock: a descriptor
 * holding an exclusive flock on it, which says "its agent lives" for as long as the
 * caller keeps it open (close it after ds_error_file_remove_dir; the kernel drops it when
 * the agent dies). An agent killed outright leaves its directory behind: this call first
 * removes such directories of this host's agents that are gone. */
int ds_error_file_dir(const char *job, char **dir, int *lock, ds_err *err);
/* The error file of rank in dir (malloc'd; NULL when out of memory). */
char *ds_error_file_path(const char *dir, int rank);
/* 1 with *out the failure record (JSON, as failure_record.h writes it: kind "program")
 * when path holds an error the program wrote; 0 when there is none or it cannot be read. */
int ds_error_file_record(const char *path, int rank, const char *host, ds_buf *out);
/* Removes rank's error file; then the emptied directory. */
void ds_error_file_forget(const char *dir, int rank);
void ds_error_file_remove_dir(const char *dir);

#endif
