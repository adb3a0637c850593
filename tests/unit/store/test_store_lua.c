/* ds.store.* and ds.barrier from Lua: against a real store, and with no store at all
 * (`dsrun run`, a world of one), where the same script must run unchanged. */
#include <lauxlib.h>
#include <lualib.h>

#include "ds_context.h"
#include "ds_lua.h"
#include "store_test_util.h"

/* A state with `ds` = the store's part of ds._core, and ctx attached. */
static lua_State *new_state(ds_context *ctx) {
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    ds_context_attach(L, ctx);
    lua_newtable(L);
    ds_lua_open_store(L);
    lua_setglobal(L, "ds");
    return L;
}

/* Runs chunk; returns NULL on success or the error message (valid until lua_close). */
static const char *run(lua_State *L, const char *chunk) {
    if (luaL_loadbuffer(L, chunk, strlen(chunk), "=test") != LUA_OK || lua_pcall(L, 0, 0, 0) != LUA_OK)
        return lua_tostring(L, -1);
    return NULL;
}

#define RUN_OK(L, chunk)                                                      \
    do {                                                                      \
        const char *e_ = run(L, chunk);                                       \
        if (e_) fail_msg("%s", e_);                                           \
    } while (0)

static const char *SCRIPT =
    "ds.store.set('a', 'one')\n"
    "assert(ds.store.get('a') == 'one')\n"
    "assert(ds.store.get('a', 1.5) == 'one')\n"
    "ds.store.set('n', 5)\n"
    "assert(ds.store.add('n', 2) == 7)\n"
    "assert(ds.store.add('fresh', 3) == 3)\n"
    "assert(ds.store.get('fresh') == '3')\n"
    "ds.store.wait({'a', 'n'})\n"
    "assert(ds.store.check({'a', 'n'}) == true)\n"
    "assert(ds.store.check({'a', 'zz'}) == false)\n"
    "assert(ds.store.delete('a') == true)\n"
    "assert(ds.store.delete('a') == false)\n"
    "ds.store.set('bin', 'x\\0y')\n"
    "assert(ds.store.get('bin') == 'x\\0y')\n"
    "ds.barrier()\n"
    "ds.barrier(5)\n";

static void test_local_world_of_one(void **state) {
    (void)state;
    ds_context ctx;
    ds_context_single(&ctx);
    lua_State *L = new_state(&ctx);
    RUN_OK(L, SCRIPT);
    const char *e = run(L, "ds.store.get('missing')");
    assert_non_null(e);
    assert_non_null(strstr(e, "test:1: get 'missing': no such key"));
    e = run(L, "ds.store.add('bin', 1)");
    assert_non_null(strstr(e, "not an integer"));
    e = run(L, "ds.store.set('', 'x')");
    assert_non_null(strstr(e, "empty key"));
    e = run(L, "ds.store.wait({})");
    assert_non_null(strstr(e, "1..1024 keys"));
    lua_close(L);
}

static void test_with_store(void **state) {
    fixture *f = *state;
    ds_context ctx;
    ds_context_single(&ctx);
    ctx.store = (struct ds_store_client *)connect_ok(f);
    ds_err err;
    assert_int_equal(ds_store_set_prefix((ds_store_client *)ctx.store, "a0/", &err), 0);
    lua_State *L = new_state(&ctx);
    RUN_OK(L, SCRIPT);
    /* What Lua set is in the store under the attempt prefix. */
    ds_store_client *c = connect_ok(f);
    void *v;
    size_t len;
    assert_int_equal(ds_store_get(c, "a0/fresh", &v, &len, 0, &err), 0);
    assert_string_equal(v, "3");
    free(v);
    const char *e = run(L, "ds.store.get('missing', 0.05)");
    assert_non_null(e);
    assert_non_null(strstr(e, "get 'a0/missing' from 127.0.0.1:"));
    assert_non_null(strstr(e, "timed out after 0.05 s"));
    e = run(L, "ds.store.add('bin', 1)");
    assert_non_null(strstr(e, "not an integer"));
    /* A world of two where the other rank never comes: barrier times out, names rank 1. */
    ctx.world_size = 2;
    e = run(L, "ds.barrier(0.1)");
    assert_non_null(e);
    assert_non_null(strstr(e, "1 of 2 ranks arrived; missing rank 1"));
    lua_close(L);
    ds_store_close(c);
    ds_store_close((ds_store_client *)ctx.store);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_world_of_one),
        cmocka_unit_test_setup_teardown(test_with_store, fixture_up, fixture_down),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
