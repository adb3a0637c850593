/* PyTorch's error file for program ranks. torch.distributed.elastic's @record (and
 * torchrun's children) write the exception that ended a process to the path in
 * TORCHELASTIC_ERROR_FILE, as
 *     {"message": {"message": "RuntimeError: ...", "extraInfo": {"py_callstack": "...",
 *                  "timestamp": "1733440000"}}}
 * A program has no failure-record pipe of ours, so without this its root cause rests on
 * when each process ended, and a rank that fails first but takes long to tear down loses
 * to a peer that only saw its sockets close (docs/operations.md). The agent gives every
 * program rank such a path in a directory of its own and, when a rank ends badly without
 * a record, turns the file into one: the error's message and stack, the time the file
 * was written (its mtime: the file's own timestamp has whole seconds only), and whether
 * the error is a peer's failure seen through the transport. */
#include "error_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds_json_read.h"
#include "failure_json.h"
#include "ds_textfile.h"

/* Errors torch raises in a rank whose peer went away: Gloo's and NCCL's words. */
static const char *const TRANSPORT_WORDS[] = {
    "Connection closed by peer", "Connection reset by peer", "Broken pipe",
    "NCCL communicator was aborted", "ncclRemoteError", "ncclSystemError", NULL};

int ds_error_file_dir(const char *job, char **dir, ds_err *err) {
    const char *tmp = getenv("TMPDIR");
    char *templ;
    if (asprintf(&templ, "%s/dsrun-errors-%.100s-XXXXXX", tmp && *tmp ? tmp : "/tmp", job && *job ? job : "job") < 0)
        return ds_err_set(err, "out of memory");
    if (!mkdtemp(templ)) {
        ds_err_errno(err, errno, "directory for the ranks' error files (%s)", templ);
        free(templ);
        return -1;
    }
    *dir = templ;
    return 0;
}

char *ds_error_file_path(const char *dir, int rank) {
    char *p;
    return asprintf(&p, "%s/rank-%d.json", dir, rank) < 0 ? NULL : p;
}

static int is_transport(const char *msg) {
    for (int i = 0; TRANSPORT_WORDS[i]; i++)
        if (strstr(msg, TRANSPORT_WORDS[i])) return 1;
    return 0;
}

/* torch writes {"message": {...}}; a hand-written file may give "message" as text.
 * *stack: the Python stack when there is one as text. */
static const ds_jv *message_of(const ds_jv *root, const ds_jv **stack) {
    const ds_jv *m = ds_jv_get(root, "message");
    *stack = NULL;
    if (m && m->type == DS_JV_OBJ) {
        const ds_jv *extra = ds_jv_get(m, "extraInfo");
        const ds_jv *st = extra ? ds_jv_get(extra, "py_callstack") : NULL;
        if (st && st->type == DS_JV_STR) *stack = st;
        m = ds_jv_get(m, "message");
    }
    return m && m->type == DS_JV_STR ? m : NULL;
}

int ds_error_file_record(const char *path, int rank, const char *host, ds_buf *out) {
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* the rank wrote none */
    ds_err err = {{0}};
    char *text = ds_textfile_read(path, "error file", 1 << 20, &err);
    if (!text) return 0;
    ds_jv *root = ds_jv_parse(text, strlen(text), &err);
    free(text);
    const ds_jv *stack, *msg = root ? message_of(root, &stack) : NULL;
    if (!msg) {
        ds_jv_free(root);
        return 0;
    }
    long long at_ms = (long long)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_failure_json(&j, rank, host, at_ms, "program", is_transport(msg->str), msg->str, msg->len,
                    stack ? stack->str : NULL, stack ? stack->len : 0);
    ds_jv_free(root);
    if (j.bad) {
        ds_buf_free(&j.text);
        return 0;
    }
    *out = j.text;
    return 1;
}

void ds_error_file_forget(const char *dir, int rank) {
    char *p = dir ? ds_error_file_path(dir, rank) : NULL;
    if (p) unlink(p);
    free(p);
}

void ds_error_file_remove_dir(const char *dir) {
    if (dir) rmdir(dir);
}
