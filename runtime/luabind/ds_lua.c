#include "ds_lua.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ds_lua_new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                      const luaL_Reg *meta) {
    if (luaL_newmetatable(L, name)) {
        if (methods) {
            lua_newtable(L);
            luaL_setfuncs(L, methods, 0);
            lua_setfield(L, -2, "__index");
        }
        if (meta) luaL_setfuncs(L, meta, 0);
        /* getmetatable(obj) gives the class name, not the table: a script cannot reach
         * __gc and free an object it still uses (only the debug library can). */
        lua_pushstring(L, name);
        lua_setfield(L, -2, "__metatable");
    }
    lua_pop(L, 1);
}

const char *ds_lua_unknown_key(lua_State *L, int idx, const char *const *allowed) {
    idx = lua_absindex(L, idx);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        int known = 0;
        for (int i = 0; k && allowed[i] && !known; i++) known = !strcmp(k, allowed[i]);
        if (!known) return luaL_tolstring(L, -1, NULL);
    }
    return NULL;
}

int ds_lua_raise(lua_State *L, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0) continue;
        if (strstr(ar.source, "lua/ds/")) continue; /* inside the ds library: the author's line is further up */
        lua_pushfstring(L, "%s:%d: %s", ar.short_src, ar.currentline, msg);
        return lua_error(L);
    }
    lua_pushstring(L, msg);
    return lua_error(L);
}

static const char CONTEXT_KEY = 'c'; /* its address is the registry key */

void ds_context_attach(lua_State *L, ds_context *ctx) {
    lua_pushlightuserdata(L, ctx);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);
}

ds_context *ds_context_of(lua_State *L) {
    lua_rawgetp(L, LUA_REGISTRYINDEX, &CONTEXT_KEY);
    ds_context *ctx = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return ctx;
}

#define ARRAY_KEY "__ds_array"

void ds_lua_class_array(lua_State *L, const char *name, const ds_lua_array_class *cls) {
    luaL_getmetatable(L, name);
    lua_pushlightuserdata(L, (void *)cls);
    lua_setfield(L, -2, ARRAY_KEY);
    lua_pop(L, 1);
}

ds_lua_array ds_lua_check_array(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    const ds_lua_array_class *cls = NULL;
    if (lua_getmetatable(L, idx)) {
        lua_getfield(L, -1, ARRAY_KEY);
        cls = lua_touserdata(L, -1);
        lua_pop(L, 2);
    }
    if (!cls) luaL_typeerror(L, idx, "array (a ds.Tensor)");
    ds_lua_array a = {0};
    cls->describe(L, idx, &a);
    return a;
}
