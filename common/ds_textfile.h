/* Reads a small text file written by a user (hostfile, job spec) whole, so its parser
 * sees one NUL-terminated string and can name lines in its messages. */
#ifndef DS_TEXTFILE_H
#define DS_TEXTFILE_H

#include <stddef.h>

#include "ds_err.h"

/* Returns the malloc'd contents, or NULL with err: cannot open, read error, larger than
 * max_bytes, or a NUL byte inside (named by line: not a text file). `what` names the
 * file's role in messages ("the hostfile"). */
char *ds_textfile_read(const char *path, const char *what, size_t max_bytes, ds_err *err);

#endif
