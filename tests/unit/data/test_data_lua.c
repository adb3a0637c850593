/* Runs data_lua_test.lua against the real ds._core data and safetensors bindings (with the
 * engine's tensors), in a world of rank 1 of 2 so defaults from the context show. */
#include <stdarg.h>
#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <string.h>

#include "data_test_util.h"
#include "ds_context.h"
#include "ds_lua.h"

static int traceback(lua_State *L) {
    luaL_traceback(L, L, luaL_tolstring(L, 1, NULL), 1);
    return 1;
}

static void test_lua(void **state) {
    (void)state;
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    ds_context ctx;
    ds_context_single(&ctx);
    ctx.rank = 1;
    ctx.world_size = 2;
    ds_context_attach(L, &ctx);
    lua_newtable(L);
    ds_lua_open_engine(L);
    ds_lua_open_data(L);
    lua_setglobal(L, "ds");
    lua_pushcfunction(L, traceback);
    if (luaL_loadfile(L, DATA_LUA_TEST) != LUA_OK) fail_msg("%s", lua_tostring(L, -1));
    lua_pushstring(L, scratch_dir());
    if (lua_pcall(L, 1, 1, -3) != LUA_OK) fail_msg("%s", lua_tostring(L, -1));
    int n = (int)lua_tointeger(L, -1);
    print_message("%d Lua checks passed\n", n);
    assert_true(n > 10);
    lua_close(L);
}

static int teardown(void **state) {
    (void)state;
    scratch_cleanup();
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_lua)};
    return cmocka_run_group_tests(tests, NULL, teardown);
}
