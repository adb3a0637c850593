#include "engine_test_lua.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lualib.h>

#include "comm.h"
#include "ds_context.h"
#include "ds_lua.h"
#include "lua_engine.h"

static int open_core(lua_State *L) {
    lua_newtable(L);
    ds_lua_open_engine(L);
    ds_lua_open_data(L);
    ds_lua_open_zero(L); /* every ds.Model trains through its ZeRO object */
    return 1;
}

static int msgh(lua_State *L) {
    luaL_traceback(L, L, lua_tostring(L, 1), 1);
    return 1;
}

static ds_context g_ctx; /* one rank: the Lua state's context */

lua_State *eng_lua_new(void) {
    ds_context_single(&g_ctx);
    /* DS_ENGINE_DEVICE=sim runs the same tests on the simulated GPU (a worker opens its
     * device the same way; ds_device_open keeps the first one). */
    const char *dev = getenv("DS_ENGINE_DEVICE");
    ds_err err = {{0}};
    if (dev && *dev && strcmp(dev, "auto") && ds_device_open(dev, 0, &err) != 0) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    lua_State *L = luaL_newstate();
    if (!L) return NULL;
    luaL_openlibs(L);
    ds_context_attach(L, &g_ctx);
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", DS_LUA_DIR, DS_LUA_DIR);
    lua_setfield(L, -2, "path");
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, open_core);
    lua_setfield(L, -2, "ds._core");
    lua_pop(L, 2);
    return L;
}

int eng_lua_run(lua_State *L, const char *code, int nresults) {
    lua_pushcfunction(L, msgh);
    int h = lua_gettop(L);
    if (luaL_loadbuffer(L, code, strlen(code), "=test") != LUA_OK ||
        lua_pcall(L, 0, nresults, h) != LUA_OK) {
        fprintf(stderr, "lua error: %s\n", lua_tostring(L, -1));
        lua_pop(L, 2);
        return -1;
    }
    lua_remove(L, h);
    return 0;
}

ds_tensor *eng_lua_tensor(lua_State *L, const char *expr) {
    char code[512];
    snprintf(code, sizeof code, "return %s", expr);
    if (eng_lua_run(L, code, 1) != 0) return NULL;
    ds_tensor *t = ds_lua_check_tensor(L, -1);
    if (!ds_tensor_on_host(t)) {
        ds_err err = {{0}};
        ds_tensor *h = ds_tensor_new_host(t->dtype, DS_MEM_DATA, t->ndim, t->shape, &err);
        if (!h || ds_tensor_to_host(t, 0, (size_t)t->numel, h->data, &err) != 0) {
            fprintf(stderr, "%s: %s\n", expr, err.msg);
            ds_tensor_free(h);
            return NULL;
        }
        lua_pop(L, 1);
        ds_lua_push_tensor(L, t = h); /* freed with the Lua state */
    }
    luaL_ref(L, LUA_REGISTRYINDEX); /* keep it alive */
    return t;
}

double eng_lua_number(lua_State *L, const char *expr) {
    char code[512];
    snprintf(code, sizeof code, "return %s", expr);
    if (eng_lua_run(L, code, 1) != 0) return 0.0 / 0.0;
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    return v;
}

void eng_lua_close(lua_State *L) {
    if (L) lua_close(L);
    ds_comm_close(g_ctx.comm); /* the world-of-one communicator a model's ZeRO opened */
    g_ctx.comm = NULL;
}
