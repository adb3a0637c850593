#include "cgroup.h"

#include "ds_proctree.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The cgroup v2 mount point (from /proc/self/mountinfo) into mnt. */
static int cgroup2_mount(char *mnt, size_t cap) {
    FILE *f = fopen("/proc/self/mountinfo", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        /* ... mountpoint ... - fstype source options */
        char *dash = strstr(line, " - ");
        if (!dash || strncmp(dash + 3, "cgroup2 ", 8)) continue;
        char point[4096];
        if (sscanf(line, "%*s %*s %*s %*s %4095s", point) == 1 && strlen(point) < cap) {
            snprintf(mnt, cap, "%s", point);
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}

/* This process's cgroup v2 path ("0::/path" in /proc/self/cgroup). */
static int own_cgroup(char *path, size_t cap) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3)) continue;
        line[strcspn(line, "\n")] = 0;
        const char *p = strcmp(line + 3, "/") ? line + 3 : "";
        found = strlen(p) < cap;
        if (found) memcpy(path, p, strlen(p) + 1);
    }
    fclose(f);
    return found ? 0 : -1;
}

/* rmdir, retried while the kernel still empties the cgroup. */
static void remove_dir(const char *path) {
    for (int i = 0; i < 100 && rmdir(path) != 0 && errno == EBUSY; i++) {
        struct timespec d = {0, 10000000};
        nanosleep(&d, NULL);
    }
}

/* Kills and removes base's rank-* cgroups, then base. */
static void remove_node(const char *base, int kill_first) {
    DIR *d = opendir(base);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "rank-", 5)) continue;
        char path[4400];
        if (snprintf(path, sizeof path, "%s/%s", base, e->d_name) >= (int)sizeof path) continue;
        if (kill_first) ds_cgroup_kill(path);
        remove_dir(path);
    }
    closedir(d);
    remove_dir(base);
}

void ds_cgroup_node_remove(const char *base) {
    if (base) remove_node(base, 1);
}

/* dslaunch-<pid>-node<N> of agents that are gone: kill what they left, remove them. */
static void remove_stale(const char *parent) {
    DIR *d = opendir(parent);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid, node;
        if (sscanf(e->d_name, "dslaunch-%d-node%d", &pid, &node) != 2 || pid <= 0) continue;
        if (kill(pid, 0) == 0 || errno != ESRCH) continue; /* its agent lives (or is not ours to judge) */
        char path[4400];
        if (snprintf(path, sizeof path, "%s/%s", parent, e->d_name) >= (int)sizeof path) continue;
        remove_node(path, 1);
    }
    closedir(d);
}

char *ds_cgroup_node_create(int node, char *why, unsigned long cap) {
    const char *off = getenv("DS_CGROUP");
    if (off && !strcmp(off, "off")) {
        snprintf(why, cap, "DS_CGROUP=off");
        return NULL;
    }
    char mnt[2048], own[2048], parent[4200], test[4300];
    if (cgroup2_mount(mnt, sizeof mnt) != 0 || own_cgroup(own, sizeof own) != 0) {
        snprintf(why, cap, "no cgroup v2 here");
        return NULL;
    }
    snprintf(parent, sizeof parent, "%s%s", mnt, own);
    remove_stale(parent);
    char *base;
    if (asprintf(&base, "%s/dslaunch-%d-node%d", parent, (int)getpid(), node) < 0) return NULL;
    if (mkdir(base, 0755) != 0) {
        snprintf(why, cap, "cannot create a cgroup under %s: %s", parent, strerror(errno));
        free(base);
        return NULL;
    }
    /* (the root cgroup has no cgroup.kill of its own: ask the new one) */
    snprintf(test, sizeof test, "%s/cgroup.kill", base);
    if (access(test, W_OK) != 0) {
        snprintf(why, cap, "cgroup v2 without cgroup.kill (Linux < 5.14)");
        rmdir(base);
        free(base);
        return NULL;
    }
    return base;
}

char *ds_cgroup_rank_create(const char *base, int rank) {
    char *path;
    if (asprintf(&path, "%s/rank-%d", base, rank) < 0) return NULL;
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        free(path);
        return NULL;
    }
    return path;
}
