/* How the runtime's parts expose themselves to Lua. The C library is one table,
 * `ds._core`, built by agent/script.c; each part adds its own fields to it. The public
 * `ds` module (lua/ds/init.lua) wraps `ds._core` in the torch7-nn idiom.
 *
 * Each ds_lua_open_* receives the `ds._core` table on top of the stack, adds its
 * fields (functions, sub-tables, metatables for its userdata) and leaves the stack as
 * it found it. */
#ifndef DS_LUA_H
#define DS_LUA_H

#include <lauxlib.h>
#include <lua.h>

/* Registers the metatable `name` for a userdata class once: `methods` become its
 * __index table, `meta` its metamethods (__gc, __close, __tostring, ...); either may be
 * NULL. Its __metatable is the name, so getmetatable(obj) returns the name and a script
 * cannot call __gc by hand. Leaves the stack as it found it. */
void ds_lua_new_class(lua_State *L, const char *name, const luaL_Reg *methods,
                      const luaL_Reg *meta);

/* The first key of the table at idx that is not a string in `allowed` (NULL-terminated),
 * as text pushed on the stack, or NULL when every key is allowed: for refusing a misspelt
 * option instead of defaulting it silently. */
const char *ds_lua_unknown_key(lua_State *L, int idx, const char *const *allowed);

void ds_lua_open_runtime(lua_State *L); /* agent/script.c: rank, world_size, ... */
void ds_lua_open_store(lua_State *L);   /* store/lua_store.c: store.*, barrier */
void ds_lua_open_engine(lua_State *L);  /* engine/lua_engine.c: tensors, layers, optim */
void ds_lua_open_data(lua_State *L);    /* data/lua_data.c: token files, loader, safetensors */
void ds_lua_open_comm(lua_State *L);    /* comm/lua_comm.c: collectives from Lua */
void ds_lua_open_zero(lua_State *L);    /* zero/lua_zero.c: ZeRO over a model's stages */

#endif
