/* Placeholder: the data part adds its Lua functions here. */
#include "ds_lua.h"

void ds_lua_open_data(lua_State *L) { (void)L; }
