/* Inside the engine's Lua bindings: building C layers from layer descriptions, for the
 * stage code (lua_stage.c). */
#ifndef DS_LUA_LAYER_BUILD_H
#define DS_LUA_LAYER_BUILD_H

#include <lua.h>

#include "layer.h"

/* The C layer (and its children) for the description table at idx. map_idx: a table
 * shared by one stage's build, description -> lightuserdata of its C layer (a description
 * is placed once; 'tie' finds earlier layers there or by their _built field). deps_idx: a
 * table that gets, as keys, the stages this one ties parameters to. Never raises: on
 * failure returns NULL with the reason in err and nothing leaked. */
ds_layer *ds_lua_build_layer(lua_State *L, int idx, int map_idx, int deps_idx, ds_err *err);

#endif
