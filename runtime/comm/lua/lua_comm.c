/* Collectives from Lua, on ds tensors, in the table ds._core.comm:
 *   comm.all_reduce(t [, "sum"|"avg"])      in place
 *   comm.reduce_scatter(full, shard [, op]) full: world * #shard elements (clobbered)
 *   comm.all_gather(shard, full)            full: world * #shard elements
 *   comm.broadcast(t, root)
 *   comm.barrier()
 *   comm.backend()                          "self", "gloo" or "nccl"
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

/* Host tensors for self/Gloo, device tensors for NCCL. */
static ds_tensor *check_comm_tensor(lua_State *L, ds_comm *c, int idx) {
    ds_tensor *t = ds_lua_check_tensor(L, idx);
    ds_device want = ds_comm_backend_of(c) == DS_COMM_NCCL ? DS_CUDA : DS_CPU;
    if (t->device != want)
        luaL_argerror(L, idx, want == DS_CPU ? "expected a CPU tensor" : "expected a CUDA tensor");
    return t;
}

static int raise_if(lua_State *L, int rc, const ds_err *err) {
    if (rc != 0) return ds_lua_raise(L, "%s", err->msg);
    return 0;
}

static int l_all_reduce(lua_State *L) {
    ds_comm *c = comm_of(L);
    ds_tensor *t = check_comm_tensor(L, c, 1);
    ds_err err;
    raise_if(L, ds_comm_allreduce(c, t->data, (size_t)t->numel, t->dtype, check_reduce(L, 2), &err), &err);
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
    ds_comm *c = comm_of(L);
    ds_tensor *full = check_comm_tensor(L, c, 1), *shard = check_comm_tensor(L, c, 2);
    check_split(L, c, full, shard);
    ds_err err;
    raise_if(L, ds_comm_reduce_scatter(c, full->data, shard->data, (size_t)shard->numel,
                                       shard->dtype, check_reduce(L, 3), &err), &err);
    return 0;
}

static int l_all_gather(lua_State *L) {
    ds_comm *c = comm_of(L);
    ds_tensor *shard = check_comm_tensor(L, c, 1), *full = check_comm_tensor(L, c, 2);
    check_split(L, c, full, shard);
    ds_err err;
    raise_if(L, ds_comm_allgather(c, shard->data, full->data, (size_t)shard->numel,
                                  shard->dtype, &err), &err);
    return 0;
}

static int l_broadcast(lua_State *L) {
    ds_comm *c = comm_of(L);
    ds_tensor *t = check_comm_tensor(L, c, 1);
    int root = (int)luaL_checkinteger(L, 2);
    ds_err err;
    raise_if(L, ds_comm_broadcast(c, t->data, (size_t)t->numel, t->dtype, root, &err), &err);
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

void ds_lua_open_comm(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"all_reduce", l_all_reduce}, {"reduce_scatter", l_reduce_scatter},
        {"all_gather", l_all_gather}, {"broadcast", l_broadcast},
        {"barrier", l_barrier},       {"backend", l_backend},
        {NULL, NULL},
    };
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "comm");
}
