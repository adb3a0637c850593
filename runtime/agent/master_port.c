/* MASTER_PORT, checked free rather than assumed (agent.h): node 0's agent binds the
 * port asked for (or port 0, any) on every address of its node, as torch's TCPStore
 * will, and publishes what it got in the store under a key of this attempt; the other
 * agents wait for that key. A port in use on node 0 fails the job there, naming it. */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "ds_clock.h"
#include "store_client.h"

/* Binds want (0: any) on the wildcard address, IPv6 dual-stack when there is IPv6. */
static int probe_port(int want, int *got, ds_err *err) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), v6 = fd >= 0;
    if (!v6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ds_err_errno(err, errno, "socket");
    int one = 1, zero = 0, rc;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); /* as TCPStore: TIME_WAIT is no conflict */
    if (v6) {
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any,
                                 .sin6_port = htons((uint16_t)want)};
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    } else {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY),
                                .sin_port = htons((uint16_t)want)};
        rc = bind(fd, (struct sockaddr *)&a, sizeof a);
    }
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (rc == 0) rc = getsockname(fd, (struct sockaddr *)&ss, &len);
    int e = errno;
    close(fd);
    if (rc != 0 && e == EADDRINUSE)
        return ds_err_set(err, "MASTER_PORT %d is in use on this node: give another with "
                               "--master_port, or leave it unset for a free one", want);
    if (rc != 0) return ds_err_errno(err, e, "MASTER_PORT %d: bind", want);
    *got = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* 1 when the controller closed our input (stdin or the srun link: stop), 0 when nothing
 * came within ms (after GO the controller sends nothing else). */
static int controller_closed(const ds_agent *a, int ms) {
    struct pollfd p = {.fd = a->in_fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return 0;
    char buf[256];
    ssize_t n = read(a->in_fd, buf, sizeof buf);
    return n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN);
}

/* Waits for node 0's answer (key NULL: for the controller to stop us), heartbeating,
 * until the rendezvous timeout. 0: *value set, 1: stopped, -1: error. */
static int wait_for(ds_agent *a, const char *key, char **value, ds_err *err) {
    long long deadline = ds_now_ms() + (a->rdzv_timeout_ms > 0 ? a->rdzv_timeout_ms : 300000);
    long long next_hb = 0;
    for (;;) {
        int exists = 0;
        if (key && ds_store_check(a->store, &key, 1, &exists, err) != 0) return -1;
        if (exists) {
            size_t len;
            return ds_store_get(a->store, key, (void **)value, &len, 1000, err);
        }
        long long now = ds_now_ms();
        if (now >= deadline)
            return ds_err_set(err, "node 0 did not say which MASTER_PORT within the rendezvous timeout");
        if (now >= next_hb) {
            if (ds_store_heartbeat(a->store, a->node, err) != 0) return -1;
            next_hb = now + (a->heartbeat_ms > 0 ? a->heartbeat_ms : 5000);
        }
        if (controller_closed(a, 20)) return 1;
    }
}

static int give_workers(ds_agent *a, const char *port, ds_err *err) {
    for (int i = 0; i < a->nworkers; i++) {
        ds_agent_worker *w = &a->workers[i];
        for (int j = 0; j < w->nenv; j++) {
            if (strncmp(w->env[j], "MASTER_PORT=", 12)) continue;
            char *kv;
            if (asprintf(&kv, "MASTER_PORT=%s", port) < 0) return ds_err_set(err, "out of memory");
            free(w->env[j]);
            w->env[j] = kv;
        }
    }
    return 0;
}

int ds_agent_master_port(ds_agent *a, ds_err *err) {
    if (!a->store) return 0; /* no store, no world to meet */
    char key[64];
    snprintf(key, sizeof key, "dslaunch/a%d/master_port", a->attempt);
    char *value = NULL;
    if (a->node == 0) {
        int port = 0;
        if (probe_port(a->master_port, &port, err) != 0) {
            /* tell the others, who then wait to be stopped; the controller hears it from us */
            ds_err ignored;
            ds_store_set(a->store, key, "!", 1, &ignored);
            return -1;
        }
        if (asprintf(&value, "%d", port) < 0) return ds_err_set(err, "out of memory");
        if (ds_store_set(a->store, key, value, strlen(value), err) != 0) {
            free(value);
            return -1;
        }
    } else {
        int rc = wait_for(a, key, &value, err);
        if (rc != 0) return rc;
    }
    if (value[0] == '!') { /* node 0 failed and says why: wait to be stopped */
        free(value);
        return wait_for(a, NULL, NULL, err) < 0 ? -1 : 1;
    }
    int rc = give_workers(a, value, err);
    free(value);
    return rc;
}
