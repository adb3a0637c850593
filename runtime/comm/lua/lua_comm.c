/* Collectives from Lua, on ds tensors, in the table ds._core.comm:
 *   comm.all_reduce(t [, "sum"|"avg"])      in place
 *   comm.reduce_scatter(full, shard [, op]) full: world * #shard elements (clobbered)
 *   comm.all_gather(shard, full)            full: world * #shard elements
 *   comm.broadcast(t, root)
 *   comm.barrier()
 *   comm.backend()                          "self", "gloo" or "nccl"
 *   comm.wait_seconds()                     time blocked in collectives so far (opens nothing)
 * The communicator is the context's (ctx->comm); the first call opens it with
 * ds_comm_open when the worker has not, and it stays in ctx->comm for the worker to
 * close. Errors are raised as Lua errors carrying the comm's message. */
#include <string.h>

#include "comm.h"
#include "ds_lua.h"
#include "lua_engine.h"

static ds_comm *comm_of(lua_State *L) {
    ds_context *ctx = ds_context_of(L);
    if (!ctx) ds_lua_raise(L, "comm: no rank context in this Lua state");
    if (!ctx->comm) {
        ds_err err;
        ctx->comm = ds_comm_open(ctx, &err);
        if (!ctx->comm) ds_lua_raise(L, "%s", err.msg);
    }
    return ctx->comm;
}

static ds_comm_reduce check_reduce(lua_State *L, int idx) {
    static const char *const names[] = {"sum", "avg", NULL};
    return (ds_comm_reduce)luaL_checkoption(L, idx, "sum", names);
}

/* The communicator works on the rank's device memory. A script's tensor in host memory
 * on a rank whose device is not the host goes through a device copy (pushed as a tensor
 * userdata, so the GC frees it whatever happens); copy_back writes the result back. */
typedef struct comm_arg {
    ds_tensor *t;   /* what the script gave */
    ds_tensor *dev; /* what the communicator sees: t, or its device copy */
} comm_arg;

static comm_arg check_comm_tensor(lua_State *L, ds_comm *c, int idx) {
    (void)c;
    comm_arg a = {ds_lua_check_tensor(L, idx), NULL};
    a.dev = a.t;
    ds_device *d = ds_device_get();
    if (ds_tensor_device(a.t) == d || (ds_device_is_host(d) && ds_tensor_on_host(a.t))) return a;
    if (!ds_tensor_on_host(a.t)) luaL_argerror(L, idx, "a tensor of another device");
    ds_err err = {{0}};
    if (!(a.dev = ds_tensor_new(a.t->dtype, DS_MEM_COMM, a.t->ndim, a.t->shape, &err)))
        ds_lua_raise(L, "comm: %s", err.msg);
    ds_lua_push_tensor(L, a.dev);
    if (ds_tensor_from_host(a.dev, 0, (size_t)a.t->numel, a.t->data, &err) != 0)
        ds_lua_raise(L, "comm: %s", err.msg);
    return a;
}

static void copy_back(lua_State *L, const comm_arg *a) {
    ds_err err = {{0}};
    if (a->dev != a->t && ds_tensor_to_host(a->dev, 0, (size_t)a->t->numel, a->t->data, &err) != 0)
        ds_lua_raise(L, "comm: %s", err.msg);
}

static int raise_if(lua_State *L, int rc, const ds_err *err) {
    if (rc != 0) return ds_lua_raise(L, "%s", err->msg);
    return 0;
}

/* Each function fixes its arguments' slots first: a device copy is pushed above them. */
static int l_all_reduce(lua_State *L) {
    lua_settop(L, 2);
    ds_comm *c = comm_of(L);
    comm_arg t = check_comm_tensor(L, c, 1);
    ds_err err;
    raise_if(L, ds_comm_allreduce(c, t.dev->data, (size_t)t.t->numel, t.t->dtype, check_reduce(L, 2), &err), &err);
    copy_back(L, &t);
    return 0;
}

static void check_split(lua_State *L, ds_comm *c, const ds_tensor *full, const ds_tensor *shard) {
    if (full->dtype != shard->dtype) ds_lua_raise(L, "comm: dtypes differ (%s, %s)",
                                                ds_dtype_name(full->dtype), ds_dtype_name(shard->dtype));
    if (full->numel != shard->numel * ds_comm_size(c))
        ds_lua_raise(L, "comm: full tensor has %lld elements, expected %lld (world %d x shard %lld)",
                     (long long)full->numel, (long long)(shard->numel * ds_comm_size(c)),
                     ds_comm_size(c), (long long)shard->numel);
}

static int l_reduce_scatter(lua_State *L) {
    lua_settop(L, 3);
    ds_comm *c = comm_of(L);
    comm_arg full = check_comm_tensor(L, c, 1), shard = check_comm_tensor(L, c, 2);
    check_split(L, c, full.t, shard.t);
    ds_err err;
    raise_if(L, ds_comm_reduce_scatter(c, full.dev->data, shard.dev->data, (size_t)shard.t->numel,
                                       shard.t->dtype, check_reduce(L, 3), &err), &err);
    copy_back(L, &full); /* a reduce-scatter may use its input as scratch */
    copy_back(L, &shard);
    return 0;
}

static int l_all_gather(lua_State *L) {
    lua_settop(L, 2);
    ds_comm *c = comm_of(L);
    comm_arg shard = check_comm_tensor(L, c, 1), full = check_comm_tensor(L, c, 2);
    check_split(L, c, full.t, shard.t);
    ds_err err;
    raise_if(L, ds_comm_allgather(c, shard.dev->data, full.dev->data, (size_t)shard.t->numel,
                                  shard.t->dtype, &err), &err);
    copy_back(L, &full);
    return 0;
}

static int l_broadcast(lua_State *L) {
    lua_settop(L, 2);
    ds_comm *c = comm_of(L);
    comm_arg t = check_comm_tensor(L, c, 1);
    int root = (int)luaL_checkinteger(L, 2);
    ds_err err;
    raise_if(L, ds_comm_broadcast(c, t.dev->data, (size_t)t.t->numel, t.t->dtype, root, &err), &err);
    copy_back(L, &t);
    return 0;
}

static int l_barrier(lua_State *L) {
    ds_err err;
    raise_if(L, ds_comm_barrier(comm_of(L), &err), &err);
    return 0;
}

static int l_backend(lua_State *L) {
    lua_pushstring(L, ds_comm_backend_name(ds_comm_backend_of(comm_of(L))));
    return 1;
}

static int l_wait_seconds(lua_State *L) {
    lua_pushnumber(L, ds_comm_wait_seconds());
    return 1;
}

void ds_lua_open_comm(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"all_reduce", l_all_reduce}, {"reduce_scatter", l_reduce_scatter},
        {"all_gather", l_all_gather}, {"broadcast", l_broadcast},
        {"barrier", l_barrier},       {"backend", l_backend},
        {"wait_seconds", l_wait_seconds},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "comm");
}
