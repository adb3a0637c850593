#include "local.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "ds_signals.h"

static void close_pair(int p[2]) {
    if (p[0] >= 0) close(p[0]);
    if (p[1] >= 0) close(p[1]);
}

int ds_local_start(ds_local *l, char *const argv[], ds_err *err) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1};
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC)) {
        int e = errno;
        close_pair(in);
        close_pair(out);
        close_pair(er);
        return ds_err_errno(err, e, "pipe");
    }
    if (access(argv[0], X_OK) != 0) {
        int e = errno;
        close_pair(in);
        close_pair(out);
        close_pair(er);
        return ds_err_errno(err, e, "cannot run %s", argv[0]);
    }
    pid_t pid = fork();
    if (pid == 0) {
        setsid();
        ds_signals_unblock(); /* what a process started by hand would have */
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0) _exit(127);
        close_range(3, ~0U, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    int e = errno;
    close(in[0]);
    close(out[1]);
    close(er[1]);
    if (pid < 0) {
        close(in[1]);
        close(out[0]);
        close(er[0]);
        return ds_err_errno(err, e, "fork");
    }
    fcntl(in[1], F_SETFL, O_NONBLOCK);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(er[0], F_SETFL, O_NONBLOCK);
    l->pid = pid;
    l->in_fd = in[1];
    l->out_fd = out[0];
    l->err_fd = er[0];
    return 0;
}
