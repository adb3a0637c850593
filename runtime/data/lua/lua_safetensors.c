/* ds.safetensors: save and load weights in the safetensors format (docs/data.md).
 *   ds.safetensors.save(path, {name = tensor, ...} [, {key = "value", ...}])
 *   ds.safetensors.load(path) -> {name = tensor, ...}, {key = "value", ...}
 *   ds.safetensors.info(path) -> {name = {dtype=, shape={...}, offset=, nbytes=}}, metadata */
#include <lauxlib.h>
#include <string.h>

#include "ds_lua.h"
#include "lua_safetensors.h"
#include "safetensors_dtype.h"
#include "lua_engine.h"

/* Counts the entries of the table at idx; every key must be a string. */
static size_t count_string_keys(lua_State *L, int idx, const char *what) {
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            ds_lua_raise(L, "ds.safetensors.save: %s keys must be strings, got %s", what,
                       luaL_typename(L, -1));
        n++;
    }
    return n;
}

static int l_save(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    int has_meta = !lua_isnoneornil(L, 3);
    if (has_meta) luaL_checktype(L, 3, LUA_TTABLE);
    lua_settop(L, 3);
    size_t n = count_string_keys(L, 2, "tensor");
    size_t nmeta = has_meta ? count_string_keys(L, 3, "metadata") : 0;
    /* Arrays in userdata, so a Lua error below leaks nothing; the tables keep the names and
     * tensors alive. */
    ds_st_tensor *ts = lua_newuserdatauv(L, (n + 1) * sizeof *ts, 0);
    ds_st_kv *kv = lua_newuserdatauv(L, (nmeta + 1) * sizeof *kv, 0);
    lua_newtable(L); /* host copies of device tensors, alive until the file is written */
    int copies = lua_gettop(L);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        const char *name = lua_tostring(L, -2);
        ds_tensor *t = ds_lua_check_tensor(L, -1);
        ds_st_tensor *e = &ts[i++];
        memset(e, 0, sizeof *e);
        e->name = name;
        if (ds_st_dtype_of(t->dtype, &e->dtype) != 0)
            return ds_lua_raise(L, "ds.safetensors.save: tensor '%s' has an unsupported dtype", name);
        e->ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) e->shape[d] = t->shape[d];
        e->data = t->data;
        e->nbytes = ds_tensor_nbytes(t);
        if (!ds_tensor_on_host(t)) { /* a device tensor: written from a host copy */
            void *h = lua_newuserdatauv(L, e->nbytes ? e->nbytes : 1, 0);
            ds_err err = {{0}};
            if (ds_tensor_to_host(t, 0, (size_t)t->numel, h, &err) != 0)
                return ds_lua_raise(L, "ds.safetensors.save: tensor '%s': %s", name, err.msg);
            e->data = h;
            lua_rawseti(L, copies, (lua_Integer)i);
        }
        lua_pop(L, 1);
    }
    i = 0;
    if (has_meta) {
        lua_pushnil(L);
        while (lua_next(L, 3)) {
            if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
                return ds_lua_raise(L, "ds.safetensors.save: metadata '%s' must be a string, got %s",
                                  lua_tostring(L, -2), luaL_typename(L, -1));
            if (lua_type(L, -1) == LUA_TNUMBER) { /* stringify in the table, so it stays alive */
                lua_pushvalue(L, -2);
                lua_pushstring(L, lua_tostring(L, -2));
                lua_rawset(L, 3);
                lua_pop(L, 1);
                lua_pushvalue(L, -1);
                lua_rawget(L, 3);
            }
            kv[i].key = lua_tostring(L, -2);
            kv[i].value = lua_tostring(L, -1);
            i++;
            lua_pop(L, 1);
        }
    }
    ds_err err = {{0}};
    if (ds_st_write(path, ts, n, kv, nmeta, &err) != 0)
        return ds_lua_raise(L, "ds.safetensors.save: %s", err.msg);
    return 0;
}

/* A Lua-owned handle, so the file is closed even when a Lua error cuts a load short. */
static ds_st_file **open_file(lua_State *L, const char *fn, const char *path) {
    ds_st_file **h = lua_newuserdatauv(L, sizeof *h, 0);
    *h = NULL;
    luaL_setmetatable(L, "ds.SafetensorsFile");
    ds_err err = {{0}};
    *h = ds_st_open(path, &err);
    if (!*h) ds_lua_raise(L, "%s: %s", fn, err.msg);
    return h;
}

static int l_file_gc(lua_State *L) {
    ds_st_file **h = luaL_checkudata(L, 1, "ds.SafetensorsFile");
    ds_st_close(*h);
    *h = NULL;
    return 0;
}

static void push_metadata(lua_State *L, const ds_st_file *f) {
    lua_createtable(L, 0, (int)ds_st_meta_count(f));
    for (size_t i = 0; i < ds_st_meta_count(f); i++) {
        const ds_st_kv *kv = ds_st_meta_at(f, i);
        lua_pushstring(L, kv->value);
        lua_setfield(L, -2, kv->key);
    }
}

static int l_load(lua_State *L) {
    const char *fn = "ds.safetensors.load", *path = luaL_checkstring(L, 1);
    ds_st_file **h = open_file(L, fn, path);
    ds_st_file *f = *h;
    lua_createtable(L, 0, (int)ds_st_count(f));
    for (size_t i = 0; i < ds_st_count(f); i++) {
        const ds_st_tensor *e = ds_st_at(f, i);
        ds_dtype dt;
        if (ds_dtype_of_st(e->dtype, &dt) != 0)
            return ds_lua_raise(L, "%s: %s: tensor '%s' has dtype %s (F32, F16, BF16, I32 supported)",
                              fn, path, e->name, ds_st_dtype_name(e->dtype));
        if (e->ndim > DS_MAX_DIMS)
            return ds_lua_raise(L, "%s: %s: tensor '%s' has %d dimensions (at most %d supported)",
                              fn, path, e->name, e->ndim, DS_MAX_DIMS);
        ds_err err = {{0}};
        ds_tensor *t = ds_tensor_new_host(dt, DS_MEM_DATA, e->ndim, e->shape, &err);
        if (!t) return ds_lua_raise(L, "%s: %s: tensor '%s': %s", fn, path, e->name, err.msg);
        if (e->nbytes) memcpy(t->data, e->data, e->nbytes); /* the mapping may be unaligned */
        ds_lua_push_tensor(L, t);
        lua_setfield(L, -2, e->name);
    }
    push_metadata(L, f);
    ds_st_close(f);
    *h = NULL;
    return 2;
}

static int l_info(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    ds_st_file **h = open_file(L, "ds.safetensors.info", path);
    ds_st_file *f = *h;
    lua_createtable(L, 0, (int)ds_st_count(f));
    for (size_t i = 0; i < ds_st_count(f); i++) {
        const ds_st_tensor *e = ds_st_at(f, i);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, ds_st_dtype_name(e->dtype));
        lua_setfield(L, -2, "dtype");
        lua_createtable(L, e->ndim, 0);
        for (int d = 0; d < e->ndim; d++) {
            lua_pushinteger(L, e->shape[d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_setfield(L, -2, "shape");
        lua_pushinteger(L, (lua_Integer)e->begin);
        lua_setfield(L, -2, "offset");
        lua_pushinteger(L, (lua_Integer)e->nbytes);
        lua_setfield(L, -2, "nbytes");
        lua_setfield(L, -2, e->name);
    }
    push_metadata(L, f);
    ds_st_close(f);
    *h = NULL;
    return 2;
}

void ds_lua_open_safetensors(lua_State *L) {
    static const luaL_Reg fns[] = {{"save", l_save}, {"load", l_load}, {"info", l_info},
                                   {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", l_file_gc}, {NULL, NULL}};
    ds_lua_new_class(L, "ds.SafetensorsFile", NULL, meta);
    luaL_newlib(L, fns);
    lua_setfield(L, -2, "safetensors");
}
