/* Placeholder: the comm part adds its Lua functions here. */
#include "ds_lua.h"

void ds_lua_open_comm(lua_State *L) { (void)L; }
