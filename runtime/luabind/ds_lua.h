/* How the runtime's parts expose themselves to Lua. The C library is one table,
 * `ds._core`, built by worker/script.c; each part adds its own fields to it. The public
 * `ds` module (lua/ds/init.lua) wraps `ds._core` in the torch7-nn idiom.
 *
 * Each ds_lua_open_* receives the `ds._core` table on top of the stack, adds its
 * fields (functions, sub-tables, metatables for its userdata) and leaves the stack as
 * it found it. */
#ifndef DS_LUA_H
#define DS_LUA_H

#include <lauxlib.h>
#include <lua.h>
#include <stddef.h>

#include "ds_context.h"
#include "ds_dtype.h"
#include "ds_err.h"

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

/* Stores the rank's context in L's registry / fetches it back (NULL if none was set). */
void ds_context_attach(lua_State *L, ds_context *ctx);
ds_context *ds_context_of(lua_State *L);

/* luaL_error with "file:line: " of the first caller outside the ds Lua library, so a
 * script's error names the script's line. Every binding raises its errors through it.
 * Does not return. */
int ds_lua_raise(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An array of numbers in memory that one part owns and another reads or writes (a
 * checkpoint saves and loads the engine's tensors through it without knowing the tensor
 * type). A class offers its objects as arrays by ds_lua_class_array; host is NULL for
 * memory the host cannot address (a device): read and write then copy elements
 * [first, first + n) to and from host memory. */
typedef struct ds_lua_array {
    ds_dtype dtype;
    size_t numel;
    void *host;
    void *obj;
    int (*read)(void *obj, size_t first, size_t n, void *dst, ds_err *err);
    int (*write)(void *obj, size_t first, size_t n, const void *src, ds_err *err);
} ds_lua_array;
typedef struct ds_lua_array_class {
    /* Fills out for the object at idx; raises a Lua error when it has no elements to
     * offer (e.g. freed). */
    void (*describe)(lua_State *L, int idx, ds_lua_array *out);
} ds_lua_array_class;
/* Registers cls (static storage) for the objects of metatable `name` (made already). */
void ds_lua_class_array(lua_State *L, const char *name, const ds_lua_array_class *cls);
/* The array behind the value at idx; an argument error when it is not one. */
ds_lua_array ds_lua_check_array(lua_State *L, int idx);

void ds_lua_open_runtime(lua_State *L); /* worker/script.c: rank, world_size, ... */
void ds_lua_open_store(lua_State *L);   /* store/lua/: store.*, barrier */
void ds_lua_open_engine(lua_State *L);  /* engine/lua/: tensors, layers, optim */
void ds_lua_open_data(lua_State *L);    /* data/lua/: token files, loader, safetensors */
void ds_lua_open_comm(lua_State *L);    /* comm/lua/: collectives from Lua */
void ds_lua_open_zero(lua_State *L);    /* zero/lua/: ZeRO over a model's stages */
void ds_lua_open_memplan(lua_State *L); /* memplan/lua/: the memory planner */

#endif
