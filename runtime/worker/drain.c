#include "drain.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "ds_lua.h"
#include "store_client.h"

static ds_comm *comm_of(lua_State *L, ds_context *ctx) {
    if (!ctx->comm) {
        ds_err err;
        ctx->comm = ds_comm_open(ctx, &err);
        if (!ctx->comm) ds_lua_raise(L, "drain_requested: %s", err.msg);
    }
    return ctx->comm;
}

static int l_drain_requested(lua_State *L) {
    static int announced;
    ds_context *ctx = ds_context_of(L);
    lua_Integer step = luaL_optinteger(L, 1, -1);
    if (!ctx || !ctx->store) {
        lua_pushboolean(L, 0);
        return 1;
    }
    ds_err err;
    char key[64];
    if (!announced) {
        snprintf(key, sizeof key, "drain/aware/%d", ctx->rank);
        if (ds_store_set(ctx->store, key, "1", 1, &err) != 0) ds_lua_raise(L, "drain_requested: %s", err.msg);
        announced = 1;
    }
    const char *drain = "drain";
    int exists = 0;
    if (ds_store_check(ctx->store, &drain, 1, &exists, &err) != 0) ds_lua_raise(L, "drain_requested: %s", err.msg);
    int32_t votes = exists;
    /* One rank may see the key a moment before another: the sum makes it one answer. */
    if (ctx->world_size > 1 && ds_comm_allreduce(comm_of(L, ctx), &votes, 1, DS_I32, DS_COMM_SUM, &err) != 0)
        ds_lua_raise(L, "drain_requested: %s", err.msg);
    if (votes > 0 && ctx->rank == 0 && step >= 0) {
        snprintf(key, sizeof key, "%lld", (long long)step);
        if (ds_store_set(ctx->store, "drain/step", key, strlen(key), &err) != 0)
            ds_lua_raise(L, "drain_requested: %s", err.msg);
    }
    lua_pushboolean(L, votes > 0);
    return 1;
}

void ds_lua_open_drain(lua_State *L) {
    lua_pushcfunction(L, l_drain_requested);
    lua_setfield(L, -2, "drain_requested");
}
