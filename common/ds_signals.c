#include "ds_signals.h"

#include <errno.h>
#include <signal.h>
#include <sys/signalfd.h>

int ds_signals_fd(const int *sigs, ds_err *err) {
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    for (int i = 0; sigs[i]; i++) sigaddset(&set, sigs[i]);
    if (sigprocmask(SIG_BLOCK, &set, NULL) != 0) return ds_err_errno(err, errno, "sigprocmask");
    int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) return ds_err_errno(err, errno, "signalfd");
    return fd;
}

void ds_signals_unblock(void) {
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

int ds_signals_thread(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits it */
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
