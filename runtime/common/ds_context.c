#include "ds_context.h"

#include <lauxlib.h>
#include <string.h>
#include <unistd.h>

static const char DS_CONTEXT_KEY = 'c'; /* its address is the registry key */

void ds_context_single(ds_context *ctx) {
    memset(ctx, 0, sizeof *ctx);
    ctx->world_size = 1;
    ctx->local_world_size = 1;
    if (gethostname(ctx->host, sizeof ctx->host - 1) != 0) strcpy(ctx->host, "localhost");
    strcpy(ctx->job_id, "local");
}

void ds_context_attach(lua_State *L, ds_context *ctx) {
    lua_pushlightuserdata(L, ctx);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &DS_CONTEXT_KEY);
}

ds_context *ds_context_of(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &DS_CONTEXT_KEY);
    ds_context *ctx = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return ctx;
}
