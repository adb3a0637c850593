/* ds.safetensors in Lua (lua_safetensors.c); opened by ds_lua_open_data. */
#ifndef DS_LUA_SAFETENSORS_H
#define DS_LUA_SAFETENSORS_H

#include <lua.h>

/* Adds the `safetensors` sub-table to the ds._core table on top of the stack. */
void ds_lua_open_safetensors(lua_State *L);

#endif
