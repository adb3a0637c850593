/* The Gloo backend: ops run one at a time on the communicator's thread (comm.c), each
 * a call into the C++ shim. One Gloo context, used only by that thread. */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm_backend.h"
#include "gloo_shim.h"

static ds_gloo_type gloo_type(ds_dtype dt) {
    switch (dt) {
    case DS_F32: return DS_GLOO_F32;
    case DS_BF16: return DS_GLOO_BF16;
    case DS_F16: return DS_GLOO_F16;
    case DS_I32: return DS_GLOO_I32;
    }
    return DS_GLOO_F32; /* comm.c validated dt */
}

static int gloo_run(void *be, ds_comm_handle *h, ds_err *err) {
    ds_gloo *g = be;
    size_t bytes = h->count * ds_dtype_size(h->dtype);
    switch (h->kind) {
    case DS_COMM_OP_ALLREDUCE:
        return ds_gloo_allreduce(g, h->out, h->count, gloo_type(h->dtype), h->tag, err);
    case DS_COMM_OP_REDUCE_SCATTER:
        return ds_gloo_reduce_scatter(g, h->in, h->out, h->count, gloo_type(h->dtype), h->tag,
                                      err);
    case DS_COMM_OP_ALLGATHER:
        return ds_gloo_allgather(g, h->in, h->out, bytes, h->tag, err);
    case DS_COMM_OP_BROADCAST:
        return ds_gloo_broadcast(g, h->out, bytes, h->root, h->tag, err);
    case DS_COMM_OP_BARRIER:
        return ds_gloo_barrier(g, h->tag, err);
    }
    return ds_err_set(err, "gloo: unknown op %d", (int)h->kind);
}

static void gloo_close(void *be) { ds_gloo_close(be); }

static const ds_comm_vtable gloo_vtable = {
    .backend = DS_COMM_GLOO,
    .threaded = 1,
    .native_avg = 0,
    .run = gloo_run,
    .finish = NULL,
    .close = gloo_close,
};

/* Resolves this node's address to a numeric one and checks that it can be bound, before
 * Gloo sees it: Gloo 2022 dereferences an uninitialised pointer when getaddrinfo fails
 * (it only checks for -1) and leaks the lookup when bind fails; neither a crash nor a
 * leak is a way to say "that is not this node's address". */
static int local_numeric_addr(const char *addr, char *out, size_t cap, ds_err *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(addr, NULL, &hints, &res);
    if (rc != 0)
        return ds_err_set(err, "this node's address %s (DS_NODE_ADDR, else the host name) "
                               "does not resolve: %s", addr, gai_strerror(rc));
    rc = getnameinfo(res->ai_addr, res->ai_addrlen, out, (socklen_t)cap, NULL, 0,
                     NI_NUMERICHOST);
    if (rc != 0) {
        freeaddrinfo(res);
        return ds_err_set(err, "address %s: %s", addr, gai_strerror(rc));
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int bound = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0; /* port 0 */
    int saved = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    if (!bound)
        return ds_err_errno(err, saved, "this node's address %s (%s) cannot be bound here: "
                                        "set DS_NODE_ADDR to an address of this node", addr, out);
    return 0;
}

void *ds_comm_gloo_open(const ds_comm_join *j, const ds_comm_vtable **vt, ds_err *err) {
    /* A peer that dies mid-op closes its sockets; writing to them must fail with EPIPE
     * (an error we report) instead of killing this process. */
    signal(SIGPIPE, SIG_IGN);
    char addr[NI_MAXHOST];
    if (local_numeric_addr(j->node_addr, addr, sizeof addr, err) != 0) return NULL;
    ds_gloo *g = ds_gloo_open(j->store, j->prefix, j->rank, j->world, addr, j->timeout_ms, err);
    if (!g) return NULL;
    *vt = &gloo_vtable;
    return g;
}
