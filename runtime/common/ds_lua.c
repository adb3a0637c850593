#include <string.h>

#include "ds_lua.h"

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
