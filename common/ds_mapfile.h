/* A regular file mapped read-only, whole: how token files, safetensors files and texts
 * to tokenize are read (the OS pages them in as they are used). */
#ifndef DS_MAPFILE_H
#define DS_MAPFILE_H

#include <stddef.h>

#include "ds_err.h"

typedef struct ds_mapfile {
    void *data; /* NULL when len == 0 (an empty file maps nothing) */
    size_t len;
} ds_mapfile;

/* Opens and maps path. Errors: "PATH: cannot open[ WHAT]: reason", "PATH: not a regular
 * file", "PATH: mmap: reason". what may be NULL. */
int ds_mapfile_open(ds_mapfile *m, const char *path, const char *what, ds_err *err);
void ds_mapfile_close(ds_mapfile *m);

#endif
