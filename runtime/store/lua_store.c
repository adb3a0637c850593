/* Placeholder: the store part adds its Lua functions here. */
#include "ds_lua.h"

void ds_lua_open_store(lua_State *L) { (void)L; }
