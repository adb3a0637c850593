/* A Lua state with the ds library as `dsrun run` gives it (engine and data parts of
 * ds._core), for tests that drive the engine through its Lua API. */
#ifndef ENGINE_TEST_LUA_H
#define ENGINE_TEST_LUA_H

#include <lauxlib.h>
#include <lua.h>

#include "lua_engine.h"

lua_State *eng_lua_new(void);
/* Runs code; on error prints the message + traceback and returns -1. Results stay on
 * the stack (nresults of them). */
int eng_lua_run(lua_State *L, const char *code, int nresults);
/* The tensor global `expr` evaluates to (e.g. "m:param('wte.weight')"); the userdata is
 * kept alive in the registry until eng_lua_close. A tensor on a device the host cannot
 * read (DS_ENGINE_DEVICE=sim) comes back as a host copy of its values now. */
ds_tensor *eng_lua_tensor(lua_State *L, const char *expr);
double eng_lua_number(lua_State *L, const char *expr);
void eng_lua_close(lua_State *L);

#endif
