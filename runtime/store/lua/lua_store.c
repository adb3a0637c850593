/* ds.store.* and ds.barrier for scripts. Under a launcher they go to the rank's store
 * client (ds_context_of(L)->store, already namespaced by attempt through its prefix);
 * under `dsrun run` (no store, a world of one) they use a table inside this lua_State,
 * so a script runs unchanged: what it sets it can get, and a barrier returns at once.
 * Keys and values are Lua strings (numbers are converted); errors are Lua errors. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_context.h"
#include "ds_lua.h"
#include "store_client.h"
#include "store_proto.h"

#define DEFAULT_TIMEOUT_S 300.0 /* like torchrun's store timeout */

static const char LOCAL_KEY = 'l';   /* registry: the in-process table */
static const char BARRIER_KEY = 'b'; /* registry: barriers passed so far (their names) */

static ds_store_client *store_of(lua_State *L) {
    ds_context *ctx = ds_context_of(L);
    return ctx ? ctx->store : NULL;
}

static const char *check_key(lua_State *L, int idx) {
    size_t len;
    const char *k = luaL_checklstring(L, idx, &len);
    if (len == 0) luaL_argerror(L, idx, "empty key");
    if (strlen(k) != len) luaL_argerror(L, idx, "key contains a NUL byte");
    return k;
}

/* Optional timeout in seconds (number >= 0, or a negative number for "forever"). */
static int check_timeout_ms(lua_State *L, int idx) {
    double s = luaL_optnumber(L, idx, DEFAULT_TIMEOUT_S);
    if (isnan(s)) luaL_argerror(L, idx, "timeout is NaN");
    if (s < 0) return -1;
    return s * 1000.0 >= INT_MAX ? INT_MAX : (int)(s * 1000.0);
}

/* Reads the {keys} table at idx into a malloc'd array kept alive by the Lua strings. */
static const char **check_keys(lua_State *L, int idx, int *n) {
    luaL_checktype(L, idx, LUA_TTABLE);
    lua_Integer len = luaL_len(L, idx);
    if (len < 1 || len > DS_STORE_MAX_KEYS) luaL_argerror(L, idx, "expected a list of 1..1024 keys");
    const char **keys = lua_newuserdatauv(L, (size_t)len * sizeof *keys, 0); /* freed by the GC */
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        /* Strings only: the table (argument idx) keeps them alive after the pop. */
        if (lua_type(L, -1) != LUA_TSTRING)
            ds_lua_raise(L, "key %d: expected a string, got %s", (int)i, luaL_typename(L, -1));
        size_t klen;
        keys[i - 1] = lua_tolstring(L, -1, &klen);
        if (klen == 0 || strlen(keys[i - 1]) != klen) ds_lua_raise(L, "key %d: empty or contains a NUL byte", (int)i);
        lua_pop(L, 1);
    }
    *n = (int)len;
    return keys;
}

static int raise(lua_State *L, const ds_err *err) { return ds_lua_raise(L, "%s", err->msg); }

/* ---- the in-process table of `dsrun run` ------------------------------------------- */

static void push_local(lua_State *L) {
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &LOCAL_KEY) == LUA_TTABLE) return;
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &LOCAL_KEY);
}

/* Nothing else can set a key in a world of one: a missing key is an error at once. */
static int local_missing(lua_State *L, const char *what, const char *key) {
    return ds_lua_raise(L, "%s '%s': no such key (dsrun run: a world of one, nobody else can set it)", what, key);
}

/* ---- ds.store.* -------------------------------------------------------------------- */

static int l_set(lua_State *L) {
    const char *k = check_key(L, 1);
    size_t vlen;
    const char *v = luaL_checklstring(L, 2, &vlen);
    ds_store_client *c = store_of(L);
    if (!c) {
        push_local(L);
        lua_pushvalue(L, 2); /* a string now: luaL_checklstring converted it in place */
        lua_setfield(L, -2, k);
        return 0;
    }
    ds_err err;
    if (ds_store_set(c, k, v, vlen, &err) != 0) return raise(L, &err);
    return 0;
}

static int l_get(lua_State *L) {
    const char *k = check_key(L, 1);
    int timeout = check_timeout_ms(L, 2);
    ds_store_client *c = store_of(L);
    if (!c) {
        push_local(L);
        if (lua_getfield(L, -1, k) == LUA_TNIL) return local_missing(L, "get", k);
        return 1;
    }
    void *val;
    size_t len;
    ds_err err;
    if (ds_store_get(c, k, &val, &len, timeout, &err) != 0) return raise(L, &err);
    lua_pushlstring(L, val, len);
    free(val);
    return 1;
}

static int l_add(lua_State *L) {
    const char *k = check_key(L, 1);
    lua_Integer delta = luaL_checkinteger(L, 2);
    ds_store_client *c = store_of(L);
    if (!c) {
        push_local(L);
        lua_Integer cur = 0;
        if (lua_getfield(L, -1, k) != LUA_TNIL) {
            int isnum;
            cur = lua_tointegerx(L, -1, &isnum);
            if (!isnum) return ds_lua_raise(L, "add to '%s': value is not an integer", k);
        }
        if (__builtin_add_overflow(cur, delta, &cur)) return ds_lua_raise(L, "add to '%s' overflows", k);
        lua_pushfstring(L, "%I", (LUAI_UACINT)cur);
        lua_setfield(L, -3, k);
        lua_pushinteger(L, cur);
        return 1;
    }
    int64_t result;
    ds_err err;
    if (ds_store_add(c, k, (int64_t)delta, &result, &err) != 0) return raise(L, &err);
    lua_pushinteger(L, (lua_Integer)result);
    return 1;
}

/* Returns the first of keys missing from the local table, or NULL. */
static const char *local_first_missing(lua_State *L, const char **keys, int n) {
    push_local(L);
    for (int i = 0; i < n; i++) {
        int t = lua_getfield(L, -1, keys[i]);
        lua_pop(L, 1);
        if (t == LUA_TNIL) {
            lua_pop(L, 1);
            return keys[i];
        }
    }
    lua_pop(L, 1);
    return NULL;
}

static int l_wait(lua_State *L) {
    int n, timeout = check_timeout_ms(L, 2);
    lua_settop(L, 2); /* check_keys pushes its array above the arguments */
    const char **keys = check_keys(L, 1, &n);
    ds_store_client *c = store_of(L);
    if (!c) {
        const char *missing = local_first_missing(L, keys, n);
        return missing ? local_missing(L, "wait for", missing) : 0;
    }
    ds_err err;
    if (ds_store_wait(c, keys, n, timeout, &err) != 0) return raise(L, &err);
    return 0;
}

static int l_check(lua_State *L) {
    int n;
    lua_settop(L, 1);
    const char **keys = check_keys(L, 1, &n);
    ds_store_client *c = store_of(L);
    if (!c) {
        lua_pushboolean(L, local_first_missing(L, keys, n) == NULL);
        return 1;
    }
    int exists;
    ds_err err;
    if (ds_store_check(c, keys, n, &exists, &err) != 0) return raise(L, &err);
    lua_pushboolean(L, exists);
    return 1;
}

static int l_delete(lua_State *L) {
    const char *k = check_key(L, 1);
    ds_store_client *c = store_of(L);
    if (!c) {
        push_local(L);
        int had = lua_getfield(L, -1, k) != LUA_TNIL;
        lua_pop(L, 1);
        lua_pushnil(L);
        lua_setfield(L, -2, k);
        lua_pushboolean(L, had);
        return 1;
    }
    int deleted;
    ds_err err;
    if (ds_store_delete(c, k, &deleted, &err) != 0) return raise(L, &err);
    lua_pushboolean(L, deleted);
    return 1;
}

/* ds.barrier([timeout_s]): every rank calls barriers in the same order, so a per-state
 * counter gives each one the same fresh name on every rank. */
static int l_barrier(lua_State *L) {
    int timeout = check_timeout_ms(L, 1);
    ds_context *ctx = ds_context_of(L);
    if (!ctx || ctx->world_size <= 1) return 0;
    if (!ctx->store) return ds_lua_raise(L, "barrier: a world of %d ranks but no store", ctx->world_size);
    lua_Integer n = 0;
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, &BARRIER_KEY) == LUA_TNUMBER) n = lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_pushinteger(L, n + 1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BARRIER_KEY);
    char name[48];
    snprintf(name, sizeof name, "lua%lld", (long long)n);
    ds_err err;
    if (ds_store_barrier(ctx->store, name, ctx->rank, ctx->world_size, timeout, &err) != 0) return raise(L, &err);
    return 0;
}

void ds_lua_open_store(lua_State *L) {
    static const luaL_Reg store[] = {
        {"set", l_set}, {"get", l_get}, {"add", l_add}, {"wait", l_wait},
        {"check", l_check}, {"delete", l_delete}, {NULL, NULL},
    };
    luaL_newlib(L, store);
    lua_setfield(L, -2, "store");
    lua_pushcfunction(L, l_barrier);
    lua_setfield(L, -2, "barrier");
}
