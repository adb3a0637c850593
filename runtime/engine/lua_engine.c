/* Placeholder: the engine part adds its Lua functions here. */
#include "ds_lua.h"

void ds_lua_open_engine(lua_State *L) { (void)L; }
