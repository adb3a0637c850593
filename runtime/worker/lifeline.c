#include "lifeline.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "ds_proctree.h"

static char cgroup[4096]; /* DS_CGROUP_PATH, or "" */

static void *watch(void *arg) {
    int fd = (int)(long)arg;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    for (;;) {
        int r = poll(&p, 1, -1);
        if (r < 0 && errno == EINTR) continue;
        break; /* the agent never writes: any event means its end is closed */
    }
    if (cgroup[0]) ds_cgroup_kill(cgroup); /* every member, this worker included */
    else ds_kill_descendants();
    kill(0, SIGKILL);
    _exit(137);
    return NULL;
}

int ds_lifeline_watch(ds_err *err) {
    const char *v = getenv("DS_AGENT_FD");
    if (!v || !v[0]) return 0;
    char *end;
    long fd = strtol(v, &end, 10);
    if (*end || fd < 0 || fd > 1 << 20) return ds_err_set(err, "DS_AGENT_FD=%s is not a descriptor", v);
    const char *cg = getenv("DS_CGROUP_PATH");
    snprintf(cgroup, sizeof cgroup, "%s", cg ? cg : "");
    /* Without a cgroup, orphans of what the script starts come back here to be found. */
    if (!cgroup[0] && prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
        return ds_err_errno(err, errno, "PR_SET_CHILD_SUBREAPER");
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&t, &at, watch, (void *)fd);
    pthread_attr_destroy(&at);
    if (rc != 0) return ds_err_errno(err, rc, "starting the lifeline thread");
    /* From now on the lifeline takes the whole tree down; the death signal the agent
     * set (for the moments before this thread ran) would kill only this process and
     * leave its children behind. */
    prctl(PR_SET_PDEATHSIG, 0);
    return 0;
}
