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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ds_hostname.h"
#include "ds_json_read.h"
#include "failure_json.h"
#include "ds_textfile.h"

/* Errors torch raises in a rank whose peer went away: Gloo's and NCCL's words. */
static const char *const TRANSPORT_WORDS[] = {
    "Connection closed by peer", "Connection reset by peer", "Broken pipe",
    "NCCL communicator was aborted", "ncclRemoteError", "ncclSystemError", NULL};

#define DIR_PREFIX "dsrun-errors-"

/* This machine's name as it goes into a directory name: at most 64 bytes, no '/'. */
static void host_name(char *buf, size_t len) {
    char h[256];
    snprintf(buf, len, "%.64s", ds_hostname(h, sizeof h, "localhost"));
    for (char *c = buf; *c; c++)
        if (*c == '/') *c = '_';
}

/* The agent on this host that made a directory named DIR_PREFIX JOB-HOST-PID-XXXXXX: its
 * pid, or -1 when the name is not one of ours or names another host (a TMPDIR on a
 * shared file system holds the other nodes' directories too, whose pids mean nothing
 * here). */
static long owner_pid(const char *name, const char *host) {
    size_t pre = strlen(DIR_PREFIX), hl = strlen(host);
    if (strncmp(name, DIR_PREFIX, pre) != 0) return -1;
    const char *last = strrchr(name, '-');
    if (!last || strlen(last + 1) != 6) return -1;
    const char *p = last;
    while (p > name + pre && p[-1] >= '0' && p[-1] <= '9') p--;
    if (p == last || p[-1] != '-') return -1;
    size_t dash = (size_t)(p - 1 - name); /* the '-' between HOST and PID */
    if (dash < pre + 2 + hl) return -1;    /* a job name of one byte at least, then '-' */
    const char *h = name + dash - hl;
    if (h[-1] != '-' || strncmp(h, host, hl) != 0) return -1;
    char *end;
    long pid = strtol(p, &end, 10);
    return end == last && pid > 0 ? pid : -1;
}

/* Removes dir's rank-N.json files, then dir; anything else in it keeps it. */
static void remove_stale(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int rank, end = 0;
        if (sscanf(e->d_name, "rank-%d.json%n", &rank, &end) != 1 || !end || e->d_name[end])
            continue;
        ds_error_file_forget(dir, rank);
    }
    closedir(d);
    rmdir(dir);
}

/* A descriptor of dir holding an exclusive flock on it, or -1 (block: wait for it). The
 * lock, not the pid in the name, is what proves an agent alive: an agent in another pid
 * namespace on this host (a container sharing TMPDIR) has a pid that means nothing here. */
static int lock_dir(const char *dir, int block) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | (block ? 0 : LOCK_NB)) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* An agent killed outright (SIGKILL, the node's OOM killer) cannot remove its directory:
 * the next agent on the node removes those whose agent is gone, so they do not pile up
 * in /tmp over a job's restarts. Only directories of this user, made on this host, whose
 * agent's pid no longer exists here and whose lock nobody holds (lock_dir); a reused pid
 * keeps its directory (harmless, and the next sweep after that process ends takes it). */
static void sweep_stale(const char *tmp, const char *host) {
    DIR *d = opendir(tmp);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid = owner_pid(e->d_name, host);
        if (pid < 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char *path;
        if (asprintf(&path, "%s/%s", tmp, e->d_name) < 0) continue;
        struct stat st;
        int fd = -1;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
            (fd = lock_dir(path, 0)) >= 0)
            remove_stale(path);
        if (fd >= 0) close(fd);
        free(path);
    }
    closedir(d);
}

int ds_error_file_dir(const char *job, char **dir, int *lock, ds_err *err) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char host[80];
    host_name(host, sizeof host);
    sweep_stale(tmp, host);
    char *templ;
    if (asprintf(&templ, "%s/" DIR_PREFIX "%.100s-%s-%ld-XXXXXX", tmp, job && *job ? job : "job",
                 host, (long)getpid()) < 0)
        return ds_err_set(err, "out of memory");
    /* Between mkdtemp and the lock only a sweeper in another pid namespace, to which this
     * pid looks gone, can take the directory: the lock (blocking while that sweeper holds
     * it) then finds it unlinked, and the agent says so rather than losing error files. */
    int fd = mkdtemp(templ) ? lock_dir(templ, 1) : -1;
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || st.st_nlink == 0)) {
        close(fd);
        fd = -1;
        errno = ENOENT;
    }
    if (fd < 0) {
        ds_err_errno(err, errno, "directory for the ranks' error files (%s)", templ);
        free(templ);
        return -1;
    }
    *dir = templ;
    *lock = fd;
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
