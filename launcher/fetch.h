/* The job's script and arguments may be http(s) URLs carrying the SHA-256 of what they
 * name: `https://host/path/train.lua#sha256=<64 hex digits>` (an argument may also be
 * `key=URL#sha256=...`). Before any rank starts, the controller fetches each once
 * (libcurl), checks its SHA-256 (a mismatch or a failed fetch is an error naming the
 * URL), keeps it in its cache (${XDG_CACHE_HOME:-~/.cache}/dslaunch/sha256/<hex>: a
 * later run with the same hash fetches nothing), and the ranks get the file at
 * .dslaunch-files/<hex>/<name> in the workdir: the controller writes it there for its
 * own node, and ships it to every other node's agent (FILE frames on the agent's stdin),
 * which writes it there before starting its ranks. The script and arguments the ranks
 * see name that relative path. */
#ifndef DS_FETCH_H
#define DS_FETCH_H

#include <stddef.h>

#include "ds_buf.h"
#include "ds_err.h"

typedef struct ds_fetched {
    char *url;       /* as given, without the fragment */
    char sha[65];    /* hex */
    char *relpath;   /* .dslaunch-files/<hex>/<name>, relative to the workdir */
    char *cached;    /* the controller's copy */
    size_t size;
} ds_fetched;

typedef struct ds_fetch_set {
    ds_fetched *files;
    int nfiles;
    char *script;    /* the script the ranks run (the spec's, or a fetched relpath) */
    char **args;     /* likewise, NULL-terminated */
    int nargs;
} ds_fetch_set;

/* Fetches what script and args name by URL (fs->script/args get the paths the ranks
 * use; unchanged entries are copies). -1 with err on any failure. */
int ds_fetch_resolve(ds_fetch_set *fs, const char *script, char *const *args, int nargs, ds_err *err);
/* Writes every fetched file into workdir (for the controller's own node). */
int ds_fetch_place(const ds_fetch_set *fs, const char *workdir, ds_err *err);
/* Appends FILE and FILE_DATA frames carrying every fetched file to out (for an agent). */
int ds_fetch_queue(const ds_fetch_set *fs, ds_buf *out, ds_err *err);
/* 1 when s is an http(s) URL (with or without key= in front). */
int ds_fetch_is_url(const char *s);
void ds_fetch_free(ds_fetch_set *fs);

#endif
