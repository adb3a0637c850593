/* log_files.h: an LRU of open descriptors over the files (a doubly linked list through
 * the files' indices, most recently written first). */
#include "log_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h" /* ds_write_all */

typedef struct log_file {
    char *path;
    int fd;          /* -1 while closed */
    int created;     /* truncated by this run: later opens append */
    int prev, next;  /* in the open list */
} log_file;

struct ds_log_files {
    log_file *files;
    int n, cap, max_open, nopen;
    int mode;        /* of the files created ([logs] mode) */
    int head, tail;  /* most / least recently written open file, -1 none */
};

ds_log_files *ds_log_files_new(int max_open, int mode) {
    ds_log_files *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->mode = mode & 0666;
    f->max_open = max_open > 0 ? max_open : 1;
    f->head = f->tail = -1;
    return f;
}

int ds_log_files_add(ds_log_files *f, const char *path, ds_err *err) {
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 64;
        log_file *fs = realloc(f->files, (size_t)cap * sizeof *fs);
        if (!fs) return ds_err_set(err, "out of memory");
        f->files = fs;
        f->cap = cap;
    }
    /* The directory must take it (a file may already be there from an earlier run). */
    const char *slash = strrchr(path, '/');
    char dir[4096];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (access(dir, W_OK) != 0) return ds_err_errno(err, errno, "%s", path);
    char *p = strdup(path);
    if (!p) return ds_err_set(err, "out of memory");
    f->files[f->n] = (log_file){.path = p, .fd = -1, .prev = -1, .next = -1};
    return f->n++;
}

static void unlink_open(ds_log_files *f, int i) {
    log_file *lf = &f->files[i];
    if (lf->prev >= 0) f->files[lf->prev].next = lf->next;
    else f->head = lf->next;
    if (lf->next >= 0) f->files[lf->next].prev = lf->prev;
    else f->tail = lf->prev;
    lf->prev = lf->next = -1;
}

static void push_front(ds_log_files *f, int i) {
    log_file *lf = &f->files[i];
    lf->prev = -1;
    lf->next = f->head;
    if (f->head >= 0) f->files[f->head].prev = i;
    f->head = i;
    if (f->tail < 0) f->tail = i;
}

static void close_file(ds_log_files *f, int i) {
    unlink_open(f, i);
    close(f->files[i].fd);
    f->files[i].fd = -1;
    f->nopen--;
}

int ds_log_files_write(ds_log_files *f, int idx, const void *p, size_t n) {
    if (idx < 0 || idx >= f->n) return -1;
    log_file *lf = &f->files[idx];
    if (lf->fd >= 0) {
        unlink_open(f, idx);
    } else {
        if (f->nopen >= f->max_open) close_file(f, f->tail);
        lf->fd = open(lf->path, O_WRONLY | O_APPEND | O_CLOEXEC | (lf->created ? 0 : O_CREAT | O_TRUNC),
                      (mode_t)f->mode);
        if (lf->fd < 0) return -1;
        if (!lf->created) fchmod(lf->fd, (mode_t)f->mode); /* the mode asked for, not the umask's */
        lf->created = 1;
        f->nopen++;
    }
    push_front(f, idx);
    if (ds_write_all(lf->fd, p, n) != 0) {
        int e = errno;
        close_file(f, idx);
        errno = e;
        return -1;
    }
    return 0;
}

int ds_log_files_nopen(const ds_log_files *f) { return f->nopen; }

void ds_log_files_free(ds_log_files *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        if (f->files[i].fd >= 0) close(f->files[i].fd);
        int fd = f->files[i].created ? -1 : open(f->files[i].path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                                                 (mode_t)f->mode);
        if (fd >= 0) fchmod(fd, (mode_t)f->mode), close(fd); /* never written: exists, empty */
        free(f->files[i].path);
    }
    free(f->files);
    free(f);
}
