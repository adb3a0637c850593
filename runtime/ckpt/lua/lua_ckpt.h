/* State checkpoints from Lua, as fields of ds._core (docs/checkpoints.md):
 *
 *   w = core.ckpt_writer(dir, step, rank, world)
 *   w:add(name, tensor, total_numel, begin)   -> true | false, msg (kept for commit)
 *   w:commit(state, barrier)                  -> true | nil, msg
 *       state: a table (becomes meta.json "engine") or a JSON object string, or nil;
 *       barrier: function() that returns when every rank has called it (raises on
 *       failure), or nil for a world of one
 *   w:abort()
 *
 *   ck = core.ckpt_open(path)                 -> checkpoint | nil, msg
 *   ck:step(), ck:world(), ck:dir()
 *   ck:state()                                -> the state table given to commit
 *   ck:arrays()                               -> { {name=, dtype=, numel=, pieces=}, ... }
 *   ck:expect(name, dtype, numel)             -> true | nil, msg
 *   ck:read(name, begin, tensor)              -> true | nil, msg   (tensor:numel() elements)
 *   ck:verify()                               -> true | nil, msg
 *   ck:close()
 *
 *   core.ckpt_latest(dir)                     -> "step-N" | nil [, msg when malformed]
 *
 * Element offsets (total_numel, begin) are 0-based, like flat-buffer offsets in C. */
#ifndef DS_LUA_CKPT_H
#define DS_LUA_CKPT_H

#include <lua.h>

/* Adds the fields above to the table on top of the stack (ds._core). */
void ds_lua_open_ckpt(lua_State *L);

#endif
