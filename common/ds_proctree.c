#include "ds_proctree.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void ds_cgroup_kill(const char *path) {
    char file[4200];
    size_t n = strlen(path);
    if (n + 13 > sizeof file) return;
    memcpy(file, path, n);
    memcpy(file + n, "/cgroup.kill", 13);
    int fd = open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t ignored = write(fd, "1", 1);
    (void)ignored;
    close(fd);
}

/* Kills the children listed in one /proc/self/task/T/children; returns how many. */
static int kill_listed(const char *path, int *pids, int cap, int n) {
    FILE *f = fopen(path, "r");
    if (!f) return n;
    int pid;
    while (n < cap && fscanf(f, "%d", &pid) == 1) {
        kill(pid, SIGKILL);
        pids[n++] = pid;
    }
    fclose(f);
    return n;
}

void ds_kill_descendants(void) {
    for (int round = 0; round < 100; round++) {
        int pids[1024], n = 0;
        DIR *d = opendir("/proc/self/task");
        if (!d) return;
        struct dirent *e;
        while ((e = readdir(d)) && n < 1024) {
            if (e->d_name[0] == '.') continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
            n = kill_listed(path, pids, 1024, n);
        }
        closedir(d);
        if (n == 0) return;
        for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
    }
}
