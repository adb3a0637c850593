#include "ds_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ds_clock.h"

static int64_t remaining(int64_t deadline) {
    if (deadline < 0) return -1;
    int64_t r = deadline - ds_now_ms();
    return r > 0 ? r : 0;
}

/* One non-blocking connect attempt to a, bounded by deadline. Returns fd or -1 (errno). */
static int connect_one(const struct addrinfo *a, int64_t deadline) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) return -1;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) goto fail;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int rc;
    while ((rc = poll(&p, 1, (int)remaining(deadline))) < 0 && errno == EINTR) {}
    if (rc == 0) {
        errno = ETIMEDOUT;
        goto fail;
    }
    int soerr = 0;
    socklen_t len = sizeof soerr;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr) {
        errno = soerr;
        goto fail;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
fail:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

int ds_tcp_connect(const char *what, const char *host, int port, int64_t deadline, ds_err *err) {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    int rc = getaddrinfo(host, serv, &hints, &res);
    if (rc != 0) return ds_err_set(err, "%s %s:%d: cannot resolve host: %s", what, host, port, gai_strerror(rc));
    int fd = -1, e = 0;
    for (;;) {
        for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
            fd = connect_one(a, deadline);
            if (fd < 0) e = errno;
        }
        if (fd >= 0 || e != ECONNREFUSED || remaining(deadline) == 0) break;
        poll(NULL, 0, remaining(deadline) < 100 ? (int)remaining(deadline) : 100);
    }
    freeaddrinfo(res);
    if (fd < 0) return ds_err_errno(err, e, "%s %s:%d: cannot connect", what, host, port);
    return fd;
}

int ds_tcp_listen(const char *what, const char *addr, int port, int *bound_port, ds_err *err) {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    int rc = getaddrinfo(addr && *addr ? addr : NULL, serv, &hints, &res);
    if (rc != 0) return ds_err_set(err, "%s: cannot resolve '%s': %s", what, addr, gai_strerror(rc));
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 1024) != 0) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) return ds_err_errno(err, last, "%s: cannot listen on %s:%d", what, addr, port);
    struct sockaddr_storage sa = {0};
    socklen_t salen = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &salen) != 0) {
        int e = errno;
        close(fd);
        return ds_err_errno(err, e, "%s: reading the bound port", what);
    }
    *bound_port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}
