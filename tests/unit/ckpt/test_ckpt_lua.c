/* The Lua binding: save from simulated ranks, read back at another world size, the state
 * table round trip, and errors that fail the save without skipping the barriers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>

#include "ckpt_test_util.h"
#include "lua_ckpt.h"
#include "lua_engine.h"

static const char *SCRIPT =
    "local dir = ...\n"
    "local n, W = 1001, 3\n"
    "local function range(n, W, r)\n"
    "  local s = (n + W - 1) // W\n"
    "  local b = math.min(r * s, n)\n"
    "  return b, math.min(b + s, n)\n"
    "end\n"
    "assert(core.ckpt_latest(dir) == nil)\n"
    "local barriers = 0\n"
    "for r = W - 1, 0, -1 do\n"
    "  local w = core.ckpt_writer(dir, 5, r, W)\n"
    "  local b, e = range(n, W, r)\n"
    "  local x = core.tensor('fp32', e - b)\n"
    "  for i = 1, e - b do x:set(i, (b + i - 1) * 0.5) end\n"
    "  assert(w:add('stage0/params', x, n, b))\n"
    "  local ok, err = w:commit({step = 5, stages = {{name = 's0', zero = 3}}, loss_scale = 1024.5,\n"
    "                           flags = {true, false}, empty = {}},\n"
    "                          function() barriers = barriers + 1 end)\n"
    "  assert(ok, err)\n"
    "end\n"
    "assert(barriers == 2 * W)\n"
    "assert(core.ckpt_latest(dir) == 'step-5')\n"
    "local ck = assert(core.ckpt_open(dir))\n"
    "assert(ck:step() == 5 and ck:world() == W)\n"
    "local st = ck:state()\n"
    "assert(st.step == 5 and math.type(st.step) == 'integer')\n"
    "assert(st.stages[1].name == 's0' and st.stages[1].zero == 3)\n"
    "assert(st.loss_scale == 1024.5 and st.flags[1] == true and st.flags[2] == false)\n"
    "assert(type(st.empty) == 'table' and next(st.empty) == nil)\n"
    "assert(ck:expect('stage0/params', 'fp32', n))\n"
    "local ok, msg = ck:expect('stage0/params', 'bf16', n)\n"
    "assert(not ok and msg:find('expects bf16', 1, true), msg)\n"
    "for r = 0, 1 do\n"
    "  local b, e = range(n, 2, r)\n"
    "  local y = core.tensor('fp32', e - b)\n"
    "  assert(ck:read('stage0/params', b, y))\n"
    "  for i = 1, e - b do assert(y:get(i) == (b + i - 1) * 0.5) end\n"
    "end\n"
    "ok, msg = ck:read('stage0/params', 1000, core.tensor('fp32', 2))\n"
    "assert(not ok and msg:find('outside', 1, true), msg)\n"
    "ok, msg = ck:read('stage0/params', 0, core.tensor('int32', 2))\n"
    "assert(not ok and msg:find('is fp32, the tensor is int32', 1, true), msg)\n"
    "local arrays = ck:arrays()\n"
    "assert(#arrays == 1 and arrays[1].name == 'stage0/params' and arrays[1].numel == n)\n"
    "assert(arrays[1].dtype == 'fp32' and arrays[1].pieces == W)\n"
    "assert(ck:verify())\n"
    "ck:close()\n"
    "assert(not pcall(ck.step, ck))\n"
    /* A state that cannot be saved fails the save, after both barriers. */
    "local bad = {{f = print}, {1, 2, nil, 4}, {1, x = 2}, {[0.5] = 1}, {x = 0/0}}\n"
    "local frags = {'cannot be saved', 'holes', 'mixes', 'keys must be', 'finite'}\n"
    "for i, state in ipairs(bad) do\n"
    "  local calls = 0\n"
    "  local w = core.ckpt_writer(dir, 6, 0, 1)\n"
    "  local ok, err = w:commit(state, function() calls = calls + 1 end)\n"
    "  assert(not ok and err:find(frags[i], 1, true) and calls == 2, err)\n"
    "end\n"
    "local w = core.ckpt_writer(dir, 7, 0, 1)\n"
    "local ok, err = w:commit(nil, function() error('peer 3 is gone') end)\n"
    "assert(not ok and err:find('peer 3 is gone', 1, true), err)\n"
    "assert(not pcall(w.commit, w))\n"
    /* add errors come back at once and again from commit. */
    "w = core.ckpt_writer(dir, 8, 0, 1)\n"
    "ok, err = w:add('bad name', core.tensor('fp32', 1), 1, 0)\n"
    "assert(ok == false and err:find('bad array name', 1, true))\n"
    "ok, err = w:commit()\n"
    "assert(not ok and err:find('bad array name', 1, true))\n"
    "w = core.ckpt_writer(dir, 9, 0, 1)\n"
    "w:abort()\n"
    "local ck2, m2 = core.ckpt_open(dir .. '/step-6')\n"
    "assert(ck2 == nil and m2:find('no checkpoint here', 1, true), m2)\n"
    "assert(core.ckpt_latest(dir) == 'step-5')\n"
    "collectgarbage()\n"
    "return 'ok'\n";

static void test_lua_binding(void **state) {
    (void)state;
    char *dir = make_scratch_dir();
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_newtable(L);
    ds_lua_open_tensor(L);
    ds_lua_open_ckpt(L);
    lua_setglobal(L, "core");
    if (luaL_loadstring(L, SCRIPT) != LUA_OK) fail_msg("load: %s", lua_tostring(L, -1));
    lua_pushstring(L, dir);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) fail_msg("script: %s", lua_tostring(L, -1));
    assert_string_equal(lua_tostring(L, -1), "ok");
    lua_close(L);
    rm_rf(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lua_binding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
