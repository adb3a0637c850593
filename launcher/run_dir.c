#include "run_dir.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int ds_mkdir_p(const char *dir, int mode, ds_err *err) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) return ds_err_set(err, "path too long: %s", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(path, (mode_t)mode) == 0) chmod(path, (mode_t)mode); /* exactly mode, whatever the umask */
        else if (errno != EEXIST) return ds_err_errno(err, errno, "mkdir %s", path);
        *p = c;
        if (!c) return 0;
    }
}

int ds_run_dir_create(const char *job_dir, const char *suffix, int mode, char **run_dir, ds_err *err) {
    *run_dir = NULL;
    if (ds_mkdir_p(job_dir, mode, err) != 0) return -1;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    char id[64];
    strftime(id, sizeof id, "%Y%m%d-%H%M%S", &tm);
    snprintf(id + strlen(id), sizeof id - strlen(id), "-%.16s", suffix);
    if (asprintf(run_dir, "%s/%s", job_dir, id) < 0) {
        *run_dir = NULL;
        return ds_err_set(err, "out of memory");
    }
    /* A new directory, never an old one: the suffix is random, so EEXIST is a real clash. */
    if (mkdir(*run_dir, (mode_t)mode) != 0) return ds_err_errno(err, errno, "mkdir %s", *run_dir);
    chmod(*run_dir, (mode_t)mode);
    /* latest: a new link renamed over the old one, so it is never missing or half made. */
    char tmp[4200], latest[4200];
    snprintf(tmp, sizeof tmp, "%s/.latest-%s", job_dir, id);
    snprintf(latest, sizeof latest, "%s/latest", job_dir);
    unlink(tmp);
    if (symlink(id, tmp) != 0) return ds_err_errno(err, errno, "symlink %s", tmp);
    if (rename(tmp, latest) != 0) {
        int e = errno;
        unlink(tmp);
        return ds_err_errno(err, e, "rename %s to %s", tmp, latest);
    }
    return 0;
}
