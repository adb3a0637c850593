#include "metrics_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static int metrics_fd = -1;

int ds_metrics_pipe_open(ds_err *err) {
    const char *v = getenv("DS_METRICS_FD");
    if (!v || !v[0]) return 0;
    char *end;
    long fd = strtol(v, &end, 10);
    if (*end || fd < 0 || fd > 1 << 20 || fcntl((int)fd, F_GETFD) < 0)
        return ds_err_set(err, "DS_METRICS_FD=%s is not an open descriptor", v);
    fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    metrics_fd = (int)fd;
    unsetenv("DS_METRICS_FD");
    return 0;
}

int ds_metrics_pipe_enabled(void) { return metrics_fd >= 0; }

int ds_metrics_pipe_send(const char *line, size_t n, ds_err *err) {
    if (metrics_fd < 0) return 1;
    struct iovec iov[2] = {{(void *)line, n}, {"\n", 1}};
    size_t left = n + 1;
    int k = 0;
    while (left > 0) {
        ssize_t w = writev(metrics_fd, iov + k, 2 - k);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            int e = errno;
            close(metrics_fd);
            metrics_fd = -1;
            return ds_err_errno(err, e, "metrics channel to the agent");
        }
        left -= (size_t)w;
        while (k < 2 && (size_t)w >= iov[k].iov_len) w -= (ssize_t)iov[k++].iov_len;
        if (k < 2) {
            iov[k].iov_base = (char *)iov[k].iov_base + w;
            iov[k].iov_len -= (size_t)w;
        }
    }
    return 0;
}
