/* The process-wide knobs and readings scripts see: memory accounting, the clock, kernel
 * threads and which BLAS runs. Separate because none of it belongs to a stage or layer. */
#include <lauxlib.h>
#include <time.h>

#include "ds_lua.h"
#include "kernels.h"
#include "lua_engine.h"
#include "ds_clock.h"

static void push_pair(lua_State *L, size_t cur, size_t peak, const char *name) {
    lua_createtable(L, 0, 2);
    lua_pushinteger(L, (lua_Integer)cur);
    lua_setfield(L, -2, "current");
    lua_pushinteger(L, (lua_Integer)peak);
    lua_setfield(L, -2, "peak");
    lua_setfield(L, -2, name);
}

/* core.memory() -> {params={current=,peak=}, grads=..., ..., total=..., device=,
 * device_kind=, device_free=, reserved_unused=} in bytes (device: its name; device_kind:
 * cpu, sim or cuda; device_free: what the device could still give, its allocator's unused
 * reserve included; reserved_unused: what its caching allocator holds beyond what is
 * handed out, 0 on the cpu) */
static int l_memory(lua_State *L) {
    ds_mem_stats st;
    ds_mem_get_stats(&st);
    lua_createtable(L, 0, DS_MEM_NCAT + 5);
    for (int c = 0; c < DS_MEM_NCAT; c++)
        push_pair(L, st.current[c], st.peak[c], ds_mem_cat_name((ds_mem_cat)c));
    push_pair(L, st.total_current, st.total_peak, "total");
    lua_pushinteger(L, (lua_Integer)st.reserved_unused);
    lua_setfield(L, -2, "reserved_unused");
    static const char *const KINDS[] = {"cpu", "sim", "cuda"};
    ds_device *d = ds_device_get();
    ds_device_mem m;
    d->ops->mem_info(d, &m);
    lua_pushstring(L, d->name);
    lua_setfield(L, -2, "device");
    lua_pushstring(L, KINDS[d->kind]);
    lua_setfield(L, -2, "device_kind");
    lua_pushinteger(L, (lua_Integer)m.free);
    lua_setfield(L, -2, "device_free");
    return 1;
}

static int l_memory_reset_peaks(lua_State *L) {
    (void)L;
    ds_mem_reset_peaks();
    return 0;
}

static int l_now(lua_State *L) {
    lua_pushnumber(L, ds_now_s());
    return 1;
}

static int l_set_threads(lua_State *L) {
    lua_Integer n = luaL_checkinteger(L, 1);
    if (n < 0 || n > 1024) return ds_lua_raise(L, "set_threads(%d): expected 0..1024", (int)n);
    ds_kernels_set_threads((int)n);
    return 0;
}

static int l_threads(lua_State *L) {
    lua_pushinteger(L, ds_kernels_threads());
    return 1;
}

static void set_string(lua_State *L, const char *key, const char *value) {
    if (!value) return;
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

/* ds.blas() -> {core=, config=, coretype=, forced=, reason=, why=, cpu_core=,
 * openblas_core=, tried=}: which OpenBLAS kernels the GEMMs run and why (cpu_env.c). */
static int l_blas(lua_State *L) {
    ds_blas_info b = ds_blas_describe();
    lua_createtable(L, 0, 9);
    set_string(L, "core", b.core);
    set_string(L, "config", b.config);
    set_string(L, "coretype", b.coretype);
    lua_pushboolean(L, b.forced);
    lua_setfield(L, -2, "forced");
    set_string(L, "reason", b.reason_name);
    set_string(L, "why", b.why);
    set_string(L, "cpu_core", b.cpu_core);
    set_string(L, "openblas_core", b.openblas_core[0] ? b.openblas_core : NULL);
    set_string(L, "tried", b.tried[0] ? b.tried : NULL);
    return 1;
}

void ds_lua_open_system(lua_State *L) {
    static const luaL_Reg fns[] = {{"memory", l_memory},
                                   {"memory_reset_peaks", l_memory_reset_peaks},
                                   {"now", l_now},
                                   {"set_threads", l_set_threads},
                                   {"threads", l_threads},
                                   {"blas", l_blas},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
