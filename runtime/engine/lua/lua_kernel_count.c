/* ds.kernel_counts: what a script's steps ask of the device, counted per kernel-table
 * entry and memory op (kernels/kernel_count.h), for bench/gpu/step_traffic.lua. */
#include <lauxlib.h>

#include "ds_lua.h"
#include "kernel_count.h"
#include "lua_engine.h"

static void push_count(lua_State *L, const ds_kcount *c) {
    lua_createtable(L, 0, 5);
    lua_pushinteger(L, (lua_Integer)c->calls);
    lua_setfield(L, -2, "calls");
    lua_pushinteger(L, (lua_Integer)c->flops);
    lua_setfield(L, -2, "flops");
    lua_pushinteger(L, (lua_Integer)c->bytes_read);
    lua_setfield(L, -2, "bytes_read");
    lua_pushinteger(L, (lua_Integer)c->bytes_written);
    lua_setfield(L, -2, "bytes_written");
}

/* ds.kernel_counts(true): count from zero (installing the counting table if it is not);
 * ds.kernel_counts(false): stop counting, the counts kept; ds.kernel_counts() ->
 * {[entry] = {calls=, flops=, bytes_read=, bytes_written=, costs = {{calls=, flops=,
 * bytes_read=, bytes_written=}, ...}}} for every entry or op called since counting
 * started; costs: its calls by distinct per-call cost (ds_kernel_count_costs). */
static int l_kernel_counts(lua_State *L) {
    if (!lua_isnoneornil(L, 1)) {
        if (!lua_isboolean(L, 1))
            return ds_lua_raise(L, "kernel_counts(%s): expected true (count from zero), false "
                                   "(stop) or nothing (read)", luaL_typename(L, 1));
        ds_err err = {{0}};
        if (!lua_toboolean(L, 1)) ds_kernel_count_uninstall();
        else if (ds_kernel_count_installed()) ds_kernel_count_reset();
        else if (ds_kernel_count_install(ds_device_get(), &err) != 0)
            return ds_lua_raise(L, "kernel_counts: %s", err.msg);
        return 0;
    }
    lua_newtable(L);
    for (int i = 0; i < DS_KCOUNT_N; i++) {
        ds_kcount c = ds_kernel_count_get(i);
        if (!c.calls) continue;
        push_count(L, &c);
        ds_kcount costs[DS_KCOUNT_COSTS];
        int n = ds_kernel_count_costs(i, costs);
        lua_createtable(L, n, 0);
        for (int k = 0; k < n; k++) {
            push_count(L, &costs[k]);
            lua_rawseti(L, -2, k + 1);
        }
        lua_setfield(L, -2, "costs");
        lua_setfield(L, -2, ds_kernel_count_name(i));
    }
    return 1;
}

void ds_lua_open_kernel_count(lua_State *L) {
    static const luaL_Reg fns[] = {{"kernel_counts", l_kernel_counts}, {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
