/* The /metrics endpoint (prometheus.h): one thread, one connection at a time. */
#include "prometheus.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ds_buf.h"
#include "ds_clock.h"

struct ds_prom {
    int listen_fd, wake_fd, port;
    pthread_t thread;
    pthread_mutex_t lock;
    ds_buf text; /* under lock */
};

static int listen_socket(const char *addr, int port, int *bound, ds_err *err) {
    char serv[16];
    snprintf(serv, sizeof serv, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res;
    int rc = getaddrinfo(addr, serv, &hints, &res);
    if (rc != 0) return ds_err_set(err, "metrics endpoint: cannot resolve '%s': %s", addr, gai_strerror(rc));
    int fd = -1, last = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                        bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0)) {
            close(fd);
            fd = -1;
        }
        if (fd < 0) last = errno;
    }
    freeaddrinfo(res);
    if (fd < 0) return ds_err_errno(err, last, "metrics endpoint: cannot listen on %s:%d", addr, port);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &len);
    *bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Reads the request head (up to an empty line) within the deadline. -1 when the client
 * was too slow, closed, or sent more than a request head may be. */
static int read_head(int fd, char *buf, size_t cap, int64_t deadline) {
    size_t have = 0;
    while (!memmem(buf, have, "\r\n\r\n", 4) && !memmem(buf, have, "\n\n", 2)) {
        int left = (int)(deadline - ds_now_ms());
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (have + 1 >= cap || left <= 0 || poll(&p, 1, left) <= 0) return -1;
        ssize_t n = read(fd, buf + have, cap - 1 - have);
        if (n <= 0) return -1;
        have += (size_t)n;
        buf[have] = 0;
    }
    return 0;
}

static void send_all(int fd, const char *p, size_t n, int64_t deadline) {
    while (n > 0) {
        int left = (int)(deadline - ds_now_ms());
        struct pollfd pf = {.fd = fd, .events = POLLOUT};
        if (left <= 0 || poll(&pf, 1, left) <= 0) return;
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

static void answer(ds_prom *p, int fd) {
    char req[8192];
    int64_t deadline = ds_now_ms() + DS_PROM_IO_TIMEOUT_MS;
    if (read_head(fd, req, sizeof req, deadline) != 0) return;
    ds_buf out = {0};
    const char *path = !strncmp(req, "GET ", 4) ? req + 4 : NULL;
    if (path && !strncmp(path, "/metrics", 8) && strchr(" ?", path[8])) {
        pthread_mutex_lock(&p->lock);
        ds_buf_printf(&out, "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                            "Content-Length: %zu\r\nConnection: close\r\n\r\n", ds_buf_unread(&p->text));
        ds_buf_put(&out, ds_buf_str(&p->text), ds_buf_unread(&p->text));
        pthread_mutex_unlock(&p->lock);
    } else {
        const char *status = path ? "404 Not Found" : "405 Method Not Allowed";
        const char *body = path ? "only /metrics is served here\n" : "only GET is served here\n";
        ds_buf_printf(&out, "HTTP/1.1 %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                      status, strlen(body), body);
    }
    if (!out.oom) send_all(fd, ds_buf_str(&out), ds_buf_unread(&out), deadline);
    ds_buf_free(&out);
}

static void *serve(void *arg) {
    ds_prom *p = arg;
    for (;;) {
        struct pollfd pf[2] = {{.fd = p->listen_fd, .events = POLLIN}, {.fd = p->wake_fd, .events = POLLIN}};
        if (poll(pf, 2, -1) < 0 && errno != EINTR) break;
        if (pf[1].revents) break;
        if (!(pf[0].revents & POLLIN)) continue;
        int fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) continue;
        answer(p, fd);
        shutdown(fd, SHUT_WR);
        close(fd);
    }
    return NULL;
}

ds_prom *ds_prom_start(const char *addr, int port, ds_err *err) {
    if (port < 0 || port > 65535) {
        ds_err_set(err, "metrics endpoint: port %d out of range 0..65535", port);
        return NULL;
    }
    ds_prom *p = calloc(1, sizeof *p);
    if (!p) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->wake_fd = eventfd(0, EFD_CLOEXEC);
    p->listen_fd = listen_socket(addr ? addr : "127.0.0.1", port, &p->port, err);
    int rc = p->listen_fd < 0 ? -1 : p->wake_fd < 0 ? ds_err_errno(err, errno, "eventfd") : 0;
    if (rc == 0 && (rc = pthread_create(&p->thread, NULL, serve, p)) != 0) rc = ds_err_errno(err, rc, "metrics endpoint thread");
    if (rc != 0) {
        if (p->listen_fd >= 0) close(p->listen_fd);
        if (p->wake_fd >= 0) close(p->wake_fd);
        pthread_mutex_destroy(&p->lock);
        free(p);
        return NULL;
    }
    return p;
}

int ds_prom_port(const ds_prom *p) { return p->port; }

void ds_prom_set(ds_prom *p, const char *text, size_t n) {
    pthread_mutex_lock(&p->lock);
    ds_buf_clear(&p->text);
    ds_buf_put(&p->text, text, n); /* out of memory: served empty until the next set */
    pthread_mutex_unlock(&p->lock);
}

void ds_prom_stop(ds_prom *p) {
    if (!p) return;
    uint64_t one = 1;
    ssize_t ignored = write(p->wake_fd, &one, sizeof one);
    (void)ignored;
    pthread_join(p->thread, NULL);
    close(p->listen_fd);
    close(p->wake_fd);
    ds_buf_free(&p->text);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
