/* The agent's link to the controller when srun started it (docs/slurm.md). srun gives
 * every agent of the step the same stdin, so stdin carries only what all nodes share:
 * the link's address and the job token. The agent connects there and sends JOIN: the
 * token (proof it belongs to this job), its Slurm node name (which node's plan it
 * wants) and its task and step; the controller answers with that node's plan, and from
 * then on the link carries every frame both ways, as stdin and stdout do for an agent
 * started over SSH. Its closing is the dead-man switch. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <fcntl.h>
#include <unistd.h>

#include "agent.h"
#include "ds_clock.h"
#include "ds_hostname.h"
#include "ds_tcp.h"

#define LINK_CONNECT_MS 30000 /* the controller listens before srun starts */
#define LINK_PLAN_MS 60000    /* and sends the plan as soon as the JOIN is in */

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return v && *v ? v : fallback;
}

/* "host:port" or "[v6]:port" into host and port. */
static int split_addr(const char *addr, char *host, size_t cap, int *port) {
    const char *colon = strrchr(addr, ':');
    if (!colon || !colon[1]) return -1;
    const char *h = addr;
    size_t len = (size_t)(colon - addr);
    if (len >= 2 && h[0] == '[' && h[len - 1] == ']') h++, len -= 2;
    if (len == 0 || len >= cap) return -1;
    memcpy(host, h, len);
    host[len] = 0;
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (*end || p < 1 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

static int send_join(int fd, const char *token, ds_err *err) {
    char me[256];
    ds_hostname(me, sizeof me, "?");
    char payload[1024];
    int n = snprintf(payload, sizeof payload, "%s %s %s %s.%s", token, env_or("SLURMD_NODENAME", me),
                     env_or("SLURM_PROCID", "?"), env_or("SLURM_JOB_ID", "?"), env_or("SLURM_STEP_ID", "?"));
    ds_buf b = {0};
    int rc = n > 0 && (size_t)n < sizeof payload && ds_frame_append(&b, DS_FRAME_JOIN, 0, payload, (size_t)n) == 0 &&
                     ds_write_all(fd, ds_buf_head(&b), ds_buf_unread(&b)) == 0
                 ? 0
                 : ds_err_errno(err, errno, "sending JOIN");
    memset(payload, 0, sizeof payload);
    if (b.data) memset(b.data, 0, b.cap);
    ds_buf_free(&b);
    return rc;
}

/* Slots are GPU indices of the node; srun gives the step the allocation's GPUs and
 * names them in CUDA_VISIBLE_DEVICES, which may be renumbered or a subset: slot k is
 * the k-th device listed there. */
static int map_gpus(ds_agent *a, ds_err *err) {
    const char *mine = getenv("CUDA_VISIBLE_DEVICES");
    if (!mine || !*mine) return 0;
    for (int i = 0; i < a->nworkers; i++) {
        ds_agent_worker *w = &a->workers[i];
        for (int j = 0; j < w->nenv; j++) {
            if (strncmp(w->env[j], "CUDA_VISIBLE_DEVICES=", 21) != 0) continue;
            long k = strtol(w->env[j] + 21, NULL, 10);
            const char *p = mine;
            for (long skip = k; skip > 0 && p; skip--) {
                p = strchr(p, ',');
                if (p) p++;
            }
            if (k < 0 || !p || !*p)
                return ds_err_set(err, "rank %d: slot %ld, but the step has only CUDA_VISIBLE_DEVICES=%s", w->rank, k, mine);
            char *kv;
            if (asprintf(&kv, "CUDA_VISIBLE_DEVICES=%.*s", (int)strcspn(p, ","), p) < 0) return ds_err_set(err, "out of memory");
            free(w->env[j]);
            w->env[j] = kv;
        }
    }
    return 0;
}

int ds_agent_join(ds_agent *a, ds_err *err) {
    char host[256];
    int port;
    if (!a->token) return ds_err_set(err, "srun's plan has a link but no token");
    if (split_addr(a->link, host, sizeof host, &port) != 0)
        return ds_err_set(err, "link address '%s' is not host:port", a->link);
    int fd = ds_tcp_connect("controller link", host, port, ds_now_ms() + LINK_CONNECT_MS, err);
    if (fd < 0) return -1;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    /* keepalive: a controller whose machine vanished is noticed (the store link notices too) */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    struct timeval tv = {.tv_sec = LINK_PLAN_MS / 1000}, none = {0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (send_join(fd, a->token, err) != 0 || ds_agent_read_config(a, fd, err) != 0) {
        close(fd);
        return ds_err_prefix(err, "controller link %s", a->link);
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    a->in_fd = a->out_fd = fd;
    return map_gpus(a, err);
}
