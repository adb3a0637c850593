#include "lua_ckpt.h"

#include <lauxlib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"
#include "ds_json.h"
#include "ds_json_read.h"
#include "ds_lua.h"

#define WRITER_MT "ds.CkptWriter"
#define CKPT_MT "ds.Checkpoint"
#define JSON_MT "ds.CkptJson"

typedef struct lua_writer {
    ds_ckpt_writer *w; /* NULL once committed or aborted */
} lua_writer;

typedef struct lua_ckpt {
    ds_ckpt *ck;
} lua_ckpt;

static const char *const DTYPE_NAMES[] = {"fp32", "bf16", "fp16", "int32", NULL};
static const ds_dtype DTYPES[] = {DS_F32, DS_BF16, DS_F16, DS_I32};

static int fail(lua_State *L, const ds_err *err) {
    lua_pushnil(L);
    lua_pushstring(L, err->msg);
    return 2;
}

/* The array at idx with its elements in host memory: its own, or a host copy in a
 * userdata pushed here (read from the device when fill is set; *copy says which). */
static ds_lua_array host_array(lua_State *L, int idx, int fill, int *copy) {
    ds_lua_array a = ds_lua_check_array(L, idx);
    if ((*copy = !a.host) == 0) return a;
    a.host = lua_newuserdatauv(L, a.numel * ds_dtype_size(a.dtype) + 1, 0);
    ds_err err = {""};
    if (fill && a.read(a.obj, 0, a.numel, a.host, &err) != 0) ds_lua_raise(L, "checkpoint: %s", err.msg);
    return a;
}

static uint64_t check_offset(lua_State *L, int idx) {
    lua_Integer v = luaL_checkinteger(L, idx);
    if (v < 0) luaL_argerror(L, idx, "must be >= 0");
    return (uint64_t)v;
}

/* --- Lua values <-> JSON --- */

/* A table is a JSON array when its keys are exactly 1..n (n >= 1), an object when they
 * are all strings (or there are none); anything else cannot round-trip and is refused. */
static int table_is_array(lua_State *L, int idx, const char *path) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), ints = 0, strings = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) == LUA_TSTRING) strings++;
        else if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1 && lua_tointeger(L, -1) <= n)
            ints++;
        else ds_lua_raise(L, "checkpoint state %s: keys must be strings or 1..n", path);
    }
    if (strings && ints) ds_lua_raise(L, "checkpoint state %s: mixes list items and string keys", path);
    if (ints && ints != n) ds_lua_raise(L, "checkpoint state %s: a list with holes", path);
    return ints > 0;
}

static void emit_value(lua_State *L, ds_json *j, int idx, const char *path, int depth);

static void emit_table(lua_State *L, ds_json *j, int idx, const char *path, int depth) {
    if (depth >= DS_JV_MAX_DEPTH - 1)
        ds_lua_raise(L, "checkpoint state %s: nested deeper than %d levels", path,
                   DS_JV_MAX_DEPTH - 1);
    luaL_checkstack(L, 4, "checkpoint state");
    char sub[256];
    if (table_is_array(L, idx, path)) {
        ds_json_arr(j);
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_rawgeti(L, idx, i);
            snprintf(sub, sizeof sub, "%s[%lld]", path, (long long)i);
            emit_value(L, j, lua_gettop(L), sub, depth + 1);
            lua_pop(L, 1);
        }
    } else {
        ds_json_obj(j);
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            const char *k = lua_tostring(L, -2);
            ds_json_key(j, k);
            snprintf(sub, sizeof sub, "%s.%s", path, k);
            emit_value(L, j, lua_gettop(L), sub, depth + 1);
            lua_pop(L, 1);
        }
    }
    ds_json_end(j);
}

static void emit_value(lua_State *L, ds_json *j, int idx, const char *path, int depth) {
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: ds_json_bool(j, lua_toboolean(L, idx)); break;
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        ds_json_strn(j, s, n);
        break;
    }
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            ds_json_int(j, lua_tointeger(L, idx));
        } else {
            double v = lua_tonumber(L, idx);
            if (!isfinite(v)) ds_lua_raise(L, "checkpoint state %s: %f is not a finite number", path, v);
            ds_json_num(j, v);
        }
        break;
    case LUA_TTABLE: emit_table(L, j, idx, path, depth); break;
    default:
        ds_lua_raise(L, "checkpoint state %s: a %s cannot be saved", path, luaL_typename(L, idx));
    }
}

static void push_json(lua_State *L, const ds_jv *v) {
    luaL_checkstack(L, 3, "checkpoint state");
    switch (v->type) {
    case DS_JV_NULL: lua_pushnil(L); break;
    case DS_JV_BOOL: lua_pushboolean(L, v->boolean); break;
    case DS_JV_NUM:
        if (v->is_int) lua_pushinteger(L, v->inum);
        else lua_pushnumber(L, v->num);
        break;
    case DS_JV_STR: lua_pushlstring(L, v->str, v->len); break;
    case DS_JV_ARR:
        lua_createtable(L, (int)v->len, 0);
        for (size_t i = 0; i < v->len; i++) {
            push_json(L, &v->items[i]);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
        break;
    case DS_JV_OBJ:
        lua_createtable(L, 0, (int)v->len);
        for (size_t i = 0; i < v->len; i++) {
            push_json(L, &v->items[i]);
            lua_setfield(L, -2, v->keys[i]);
        }
        break;
    }
}

/* --- writer --- */

static lua_writer *check_writer(lua_State *L) {
    lua_writer *u = luaL_checkudata(L, 1, WRITER_MT);
    if (!u->w) ds_lua_raise(L, "checkpoint writer already committed or aborted");
    return u;
}

static int l_writer_new(lua_State *L) {
    const char *dir = luaL_checkstring(L, 1);
    lua_Integer step = luaL_checkinteger(L, 2), rank = luaL_checkinteger(L, 3);
    lua_Integer world = luaL_checkinteger(L, 4);
    lua_writer *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->w = NULL;
    luaL_setmetatable(L, WRITER_MT);
    ds_err err = {""};
    if (rank < 0 || world < 1 || rank >= world || world > 1 << 20 || step < 0)
        return ds_lua_raise(L, "ds.ckpt_writer: bad arguments (step %d, rank %d, world %d)",
                          (int)step, (int)rank, (int)world);
    u->w = ds_ckpt_writer_begin(dir, step, (int)rank, (int)world, &err);
    if (!u->w) return ds_lua_raise(L, "ds.ckpt_writer: %s", err.msg);
    return 1;
}

static int l_writer_add(lua_State *L) {
    lua_writer *u = check_writer(L);
    const char *name = luaL_checkstring(L, 2);
    int copy;
    ds_lua_array t = host_array(L, 3, 1, &copy);
    uint64_t total = check_offset(L, 4), begin = check_offset(L, 5);
    ds_err err = {""};
    if (ds_ckpt_writer_add(u->w, name, t.dtype, total, begin, begin + (uint64_t)t.numel, t.host,
                           &err)) {
        lua_pushboolean(L, 0);
        lua_pushstring(L, err.msg);
        return 2;
    }
    lua_pushboolean(L, 1);
    return 1;
}

typedef struct lua_barrier {
    lua_State *L;
    int fn; /* stack index of the barrier function */
} lua_barrier;

static int call_barrier(void *arg, ds_err *err) {
    lua_barrier *b = arg;
    lua_pushvalue(b->L, b->fn);
    if (lua_pcall(b->L, 0, 0, 0) != LUA_OK) {
        ds_err_set(err, "%s", lua_tostring(b->L, -1) ? lua_tostring(b->L, -1) : "error");
        lua_pop(b->L, 1);
        return -1;
    }
    return 0;
}

/* The state as JSON text, in a userdata whose __gc frees it: emit_table may raise. */
static int l_encode_state(lua_State *L) {
    ds_json *j = lua_newuserdatauv(L, sizeof *j, 0);
    ds_json_init_buf(j, 0);
    luaL_setmetatable(L, JSON_MT);
    emit_table(L, j, 1, "state", 0);
    if (j->bad) return ds_lua_raise(L, "checkpoint state: out of memory");
    return 1;
}

static int l_json_gc(lua_State *L) {
    ds_json *j = luaL_checkudata(L, 1, JSON_MT);
    ds_buf_free(&j->text);
    return 0;
}

static int l_writer_commit(lua_State *L) {
    lua_writer *u = check_writer(L);
    lua_settop(L, 3);
    if (!lua_isnil(L, 3)) luaL_checktype(L, 3, LUA_TFUNCTION);
    ds_ckpt_writer *w = u->w;
    u->w = NULL; /* commit frees it, whatever happens */
    /* A state that cannot be saved fails this rank's save but must not skip the
     * barriers: the other ranks are waiting in them. */
    const char *state = NULL;
    if (lua_istable(L, 2)) {
        lua_pushcfunction(L, l_encode_state);
        lua_pushvalue(L, 2);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK) state = ds_buf_str(&((ds_json *)lua_touserdata(L, -1))->text);
        else ds_ckpt_writer_fail(w, lua_tostring(L, -1) ? lua_tostring(L, -1) : "bad state");
    } else if (lua_type(L, 2) == LUA_TSTRING) {
        state = lua_tostring(L, 2);
    } else if (!lua_isnil(L, 2)) {
        ds_ckpt_writer_fail(w, "checkpoint state: expected a table, a JSON string or nil");
    }
    lua_barrier b = {L, 3};
    ds_err err = {""};
    if (ds_ckpt_writer_commit(w, state, lua_isnil(L, 3) ? NULL : call_barrier, &b, &err))
        return fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_writer_abort(lua_State *L) {
    lua_writer *u = luaL_checkudata(L, 1, WRITER_MT);
    ds_ckpt_writer_abort(u->w);
    u->w = NULL;
    return 0;
}

/* --- reader --- */

static lua_ckpt *check_ckpt(lua_State *L) {
    lua_ckpt *u = luaL_checkudata(L, 1, CKPT_MT);
    if (!u->ck) ds_lua_raise(L, "checkpoint already closed");
    return u;
}

static int l_open(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    lua_ckpt *u = lua_newuserdatauv(L, sizeof *u, 0);
    luaL_setmetatable(L, CKPT_MT);
    ds_err err = {""};
    u->ck = ds_ckpt_open(path, &err);
    if (!u->ck) return fail(L, &err);
    return 1;
}

static int l_step(lua_State *L) {
    lua_pushinteger(L, ds_ckpt_step(check_ckpt(L)->ck));
    return 1;
}

static int l_world(lua_State *L) {
    lua_pushinteger(L, ds_ckpt_world(check_ckpt(L)->ck));
    return 1;
}

static int l_dir(lua_State *L) {
    lua_pushstring(L, ds_ckpt_dir(check_ckpt(L)->ck));
    return 1;
}

static int l_state(lua_State *L) {
    const char *s = ds_ckpt_meta_extra(check_ckpt(L)->ck);
    ds_err err = {""};
    ds_jv *v = ds_jv_parse(s, strlen(s), &err);
    if (!v) return ds_lua_raise(L, "checkpoint state: %s", err.msg); /* checked at open */
    push_json(L, v);
    ds_jv_free(v);
    return 1;
}

static int l_arrays(lua_State *L) {
    ds_ckpt *ck = check_ckpt(L)->ck;
    uint32_t n = ds_ckpt_narrays(ck);
    lua_createtable(L, (int)n, 0);
    for (uint32_t i = 0; i < n; i++) {
        ds_ckpt_array a;
        ds_ckpt_array_at(ck, i, &a);
        lua_createtable(L, 0, 4);
        lua_pushstring(L, a.name);
        lua_setfield(L, -2, "name");
        lua_pushstring(L, ds_dtype_name(a.dtype));
        lua_setfield(L, -2, "dtype");
        lua_pushinteger(L, (lua_Integer)a.numel);
        lua_setfield(L, -2, "numel");
        lua_pushinteger(L, a.npieces);
        lua_setfield(L, -2, "pieces");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

static int l_expect(lua_State *L) {
    ds_ckpt *ck = check_ckpt(L)->ck;
    const char *name = luaL_checkstring(L, 2);
    ds_dtype t = DTYPES[luaL_checkoption(L, 3, NULL, DTYPE_NAMES)];
    uint64_t numel = check_offset(L, 4);
    ds_err err = {""};
    if (ds_ckpt_expect(ck, name, t, numel, &err)) return fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_read(lua_State *L) {
    ds_ckpt *ck = check_ckpt(L)->ck;
    const char *name = luaL_checkstring(L, 2);
    uint64_t begin = check_offset(L, 3);
    int copy;
    ds_lua_array t = host_array(L, 4, 0, &copy);
    ds_err err = {""};
    ds_ckpt_array a;
    if (ds_ckpt_array_info(ck, name, &a, &err)) return fail(L, &err);
    if (a.dtype != t.dtype) {
        ds_err_set(&err, "%s/meta.json: array '%s' is %s, the tensor is %s", ds_ckpt_dir(ck),
                   name, ds_dtype_name(a.dtype), ds_dtype_name(t.dtype));
        return fail(L, &err);
    }
    if (ds_ckpt_read_range(ck, name, begin, begin + (uint64_t)t.numel, t.host, &err))
        return fail(L, &err);
    if (copy && t.write(t.obj, 0, t.numel, t.host, &err) != 0)
        return fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_verify(lua_State *L) {
    ds_err err = {""};
    if (ds_ckpt_verify(check_ckpt(L)->ck, &err)) return fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

static int l_close(lua_State *L) {
    lua_ckpt *u = luaL_checkudata(L, 1, CKPT_MT);
    ds_ckpt_close(u->ck);
    u->ck = NULL;
    return 0;
}

static int l_latest(lua_State *L) {
    char name[64];
    ds_err err = {""};
    int has = ds_ckpt_latest(luaL_checkstring(L, 1), name, sizeof name, &err);
    if (has < 0) return fail(L, &err);
    if (has == 0) lua_pushnil(L);
    else lua_pushstring(L, name);
    return 1;
}

void ds_lua_open_ckpt(lua_State *L) {
    static const luaL_Reg writer[] = {
        {"add", l_writer_add}, {"commit", l_writer_commit}, {"abort", l_writer_abort},
        {NULL, NULL}};
    static const luaL_Reg ckpt[] = {
        {"step", l_step},     {"world", l_world},   {"dir", l_dir},       {"state", l_state},
        {"arrays", l_arrays}, {"expect", l_expect}, {"read", l_read},     {"verify", l_verify},
        {"close", l_close},   {NULL, NULL}};
    ds_lua_new_class(L, WRITER_MT, writer,
                     (const luaL_Reg[]){{"__gc", l_writer_abort}, {NULL, NULL}});
    ds_lua_new_class(L, CKPT_MT, ckpt,
                     (const luaL_Reg[]){{"__gc", l_close}, {NULL, NULL}});
    static const luaL_Reg none[] = {{NULL, NULL}};
    ds_lua_new_class(L, JSON_MT, none,
                     (const luaL_Reg[]){{"__gc", l_json_gc}, {NULL, NULL}});
    static const luaL_Reg fns[] = {
        {"ckpt_writer", l_writer_new}, {"ckpt_open", l_open}, {"ckpt_latest", l_latest},
        {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
