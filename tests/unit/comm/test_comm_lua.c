/* ds._core.comm from Lua on ds tensors, over two real processes, and in a world of one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <lualib.h>

#include "comm_test_util.h"
#include "ds_lua.h"

static const char *script =
    "local core, rank, world = ...\n"
    "local t = core.tensor('fp32', 5)\n"
    "for i = 1, 5 do t:set(i, rank * 10 + i) end\n"
    "core.comm.all_reduce(t)\n"
    "for i = 1, 5 do\n"
    "  local want = 0\n"
    "  for r = 0, world - 1 do want = want + r * 10 + i end\n"
    "  assert(t:get(i) == want, 'all_reduce ' .. i .. ': ' .. t:get(i))\n"
    "end\n"
    "core.comm.all_reduce(t, 'avg')\n"
    "local full, shard = core.tensor('fp32', 3 * world), core.tensor('fp32', 3)\n"
    "for i = 1, 3 * world do full:set(i, i + rank) end\n"
    "core.comm.reduce_scatter(full, shard)\n"
    "for k = 1, 3 do\n"
    "  local i, want = rank * 3 + k, 0\n"
    "  for r = 0, world - 1 do want = want + i + r end\n"
    "  assert(shard:get(k) == want, 'reduce_scatter ' .. k)\n"
    "end\n"
    "for k = 1, 3 do shard:set(k, rank * 100 + k) end\n"
    "core.comm.all_gather(shard, full)\n"
    "for r = 0, world - 1 do for k = 1, 3 do\n"
    "  assert(full:get(r * 3 + k) == r * 100 + k, 'all_gather')\n"
    "end end\n"
    "local b = core.tensor('fp32', 2)\n"
    "b:set(1, rank + 7)\n"
    "core.comm.broadcast(b, world - 1)\n"
    "assert(b:get(1) == world - 1 + 7, 'broadcast')\n"
    "core.comm.barrier()\n"
    "local ok, msg = pcall(core.comm.all_gather, shard, core.tensor('fp32', 5))\n"
    "assert(not ok and msg:find('expected'), msg)\n"
    "return core.comm.backend()\n";

/* Runs the script in a fresh Lua state on ctx; returns the backend name it saw, or
 * NULL with the Lua error printed. */
static const char *run_script(ds_context *ctx, char *backend, size_t cap) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ds_context_attach(L, ctx);
    lua_newtable(L);
    ds_lua_open_engine(L);
    ds_lua_open_comm(L);
    int ok = luaL_loadstring(L, script) == LUA_OK;
    if (ok) {
        lua_insert(L, -2); /* chunk, core */
        lua_pushinteger(L, ctx->rank);
        lua_pushinteger(L, ctx->world_size);
        ok = lua_pcall(L, 3, 1, 0) == LUA_OK;
    }
    if (ok) snprintf(backend, cap, "%s", lua_tostring(L, -1));
    else fprintf(stderr, "rank %d lua: %s\n", ctx->rank, lua_tostring(L, -1));
    lua_close(L);
    ds_comm_close(ctx->comm); /* the worker's job: Lua opened it on first use */
    ctx->comm = NULL;
    return ok ? backend : NULL;
}

static int lua_rank(rank_env *env) {
    char backend[16];
    RANK_CHECK(run_script(&env->ctx, backend, sizeof backend) != NULL, "script failed");
    RANK_CHECK(strcmp(backend, "gloo") == 0, "backend %s", backend);
    return 0;
}

static void test_lua_world2(void **state) {
    (void)state;
    assert_int_equal(run_ranks(2, 2, 20000, 60, lua_rank, NULL), 0);
}

static void test_lua_world_of_one(void **state) {
    (void)state;
    ds_context ctx;
    ds_context_single(&ctx);
    char backend[16];
    assert_non_null(run_script(&ctx, backend, sizeof backend));
    assert_string_equal(backend, "self");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lua_world_of_one),
        cmocka_unit_test(test_lua_world2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
