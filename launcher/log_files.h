/* Many append-only files written through a bounded number of open descriptors: every
 * rank's .out and .err (logs.c) at thousands of ranks would otherwise hold two
 * descriptors per rank for the whole job. A file is created (truncated) on its first
 * write, so a job's start does not pay for thousands of files, and opened again, in
 * append mode, when written to while not open; the least recently written one is closed
 * to make room. Files never written are created empty when the set is freed: every file
 * added exists at the end. */
#ifndef DS_LOG_FILES_H
#define DS_LOG_FILES_H

#include <stddef.h>

#include "ds_err.h"

typedef struct ds_log_files ds_log_files;

/* max_open: descriptors held at most (>= 1); mode: the files' permissions. */
ds_log_files *ds_log_files_new(int max_open, int mode);
/* Adds path (created on its first write, or at the end); returns its index, or -1 when
 * its directory cannot take it (err says why). */
int ds_log_files_add(ds_log_files *f, const char *path, ds_err *err);
/* Appends p; 0, or -1 when the file cannot be written (full disk): it is then dropped. */
int ds_log_files_write(ds_log_files *f, int idx, const void *p, size_t n);
/* Descriptors open now (for tests). */
int ds_log_files_nopen(const ds_log_files *f);
void ds_log_files_free(ds_log_files *f);

#endif
