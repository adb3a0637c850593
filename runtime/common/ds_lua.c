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
    }
    lua_pop(L, 1);
}
