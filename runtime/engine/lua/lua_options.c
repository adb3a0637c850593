/* The engine's options (common/engine_opts.h) in Lua: the table itself, the job's values
 * from the environment, and the check of a value a script gives. The ds library checks
 * nothing by hand: stage and model options go through here, so a value means the same
 * and is refused with the same words whether it came from a job spec or a script. */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "ds_lua.h"
#include "engine_opts.h"
#include "lua_engine.h"

static const char *const SCOPES[] = {"stage", "model", "job"};
static const char *const TYPES[] = {"int", "enum", "checkpoint", "number", "bytes"};

/* What a script may write for o, in the words of the error. */
static void lua_expect(const ds_engine_opt *o, char *buf, size_t len) {
    if (o->type == DS_OPT_CKPT) snprintf(buf, len, "'none', 'full', N >= 1, 'every:N' or {every = N}");
    else ds_engine_opt_expect(o, buf, len);
}

static int refuse(lua_State *L, int idx, const ds_engine_opt *o, const char *what, const char *why) {
    char expect[200];
    lua_expect(o, expect, sizeof expect);
    const char *got = luaL_tolstring(L, idx, NULL);
    if (why) return ds_lua_raise(L, "%s: %s = %s: %s", what, o->name, got, why);
    return ds_lua_raise(L, "%s: %s must be %s, got %s", what, o->name, expect, got);
}

int64_t ds_lua_engine_opt_int(lua_State *L, int idx, const ds_engine_opt *o, const char *what) {
    idx = lua_absindex(L, idx);
    ds_engine_opts v;
    char why[400];
    if (o->type == DS_OPT_CKPT && lua_istable(L, idx)) {
        lua_getfield(L, idx, "every");
        int ok = lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 1;
        int64_t n = ok ? (int64_t)lua_tointeger(L, -1) : 0;
        lua_pop(L, 1);
        if (!ok) refuse(L, idx, o, what, NULL);
        if (ds_engine_opt_check_int(o, n, why, sizeof why) != 0) refuse(L, idx, o, what, why);
        return n;
    }
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (ds_engine_opt_parse(o, lua_tostring(L, idx), &v, why, sizeof why) != 0)
            refuse(L, idx, o, what, NULL);
        return *ds_engine_opt_int(o, &v);
    }
    if (lua_isinteger(L, idx) && o->type != DS_OPT_ENUM) {
        int64_t n = (int64_t)lua_tointeger(L, idx);
        if (o->type == DS_OPT_CKPT && n < 1) refuse(L, idx, o, what, NULL);
        if (ds_engine_opt_check_int(o, n, why, sizeof why) != 0) refuse(L, idx, o, what, NULL);
        return n;
    }
    return refuse(L, idx, o, what, NULL);
}

double ds_lua_engine_opt_num(lua_State *L, int idx, const ds_engine_opt *o, const char *what) {
    char why[400];
    if (lua_type(L, idx) == LUA_TNUMBER) {
        double d = lua_tonumber(L, idx);
        if (ds_engine_opt_check_num(o, d, why, sizeof why) != 0) refuse(L, idx, o, what, NULL);
        return d;
    }
    ds_engine_opts v;
    if (lua_type(L, idx) == LUA_TSTRING &&
        ds_engine_opt_parse(o, lua_tostring(L, idx), &v, why, sizeof why) == 0)
        return *ds_engine_opt_num(o, &v);
    return refuse(L, idx, o, what, NULL);
}

/* Pushes option o's value in v the way Lua scripts write it: integers, enum names,
 * 'none' | 'full' | 'every:N', numbers, 'auto'. */
static void push_value(lua_State *L, const ds_engine_opt *o, const ds_engine_opts *v) {
    char text[64];
    if (ds_engine_opt_takes_auto(o) && *ds_engine_opt_int(o, (ds_engine_opts *)v) == DS_ENGINE_AUTO) {
        lua_pushstring(L, "auto");
        return;
    }
    switch (o->type) {
    case DS_OPT_ENUM:
    case DS_OPT_CKPT:
        ds_engine_opt_format(o, v, text, sizeof text);
        lua_pushstring(L, text);
        return;
    case DS_OPT_NUM: lua_pushnumber(L, *ds_engine_opt_num(o, (ds_engine_opts *)v)); return;
    case DS_OPT_INT:
    case DS_OPT_BYTES: lua_pushinteger(L, (lua_Integer)*ds_engine_opt_int(o, (ds_engine_opts *)v)); return;
    }
    lua_pushnil(L);
}

void ds_lua_engine_defaults(lua_State *L, ds_engine_opts *out) {
    char why[600];
    if (ds_engine_opts_from_env(out, why, sizeof why) != 0) ds_lua_raise(L, "%s", why);
}

/* core.engine_defaults() -> {name = value, ...}: the job's [engine] section as this rank
 * received it (DS_ENGINE_*), the table's defaults where unset. */
static int l_engine_defaults(lua_State *L) {
    ds_engine_opts v;
    ds_lua_engine_defaults(L, &v);
    lua_createtable(L, 0, DS_EO_COUNT);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        push_value(L, &DS_ENGINE_OPTS[i], &v);
        lua_setfield(L, -2, DS_ENGINE_OPTS[i].name);
    }
    return 1;
}

/* core.engine_options() -> {{name=, key=, env=, type=, lo=, hi=, choices=, default=,
 * scope=, doc=}, ...} in the table's order. */
static int l_engine_options(lua_State *L) {
    ds_engine_opts dflt;
    ds_engine_opts_init(&dflt);
    lua_createtable(L, DS_EO_COUNT, 0);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        const ds_engine_opt *o = &DS_ENGINE_OPTS[i];
        char env[64];
        ds_engine_opt_env_name(o, env, sizeof env);
        lua_createtable(L, 0, 10);
        lua_pushstring(L, o->name), lua_setfield(L, -2, "name");
        lua_pushstring(L, o->key), lua_setfield(L, -2, "key");
        lua_pushstring(L, env), lua_setfield(L, -2, "env");
        lua_pushstring(L, TYPES[o->type]), lua_setfield(L, -2, "type");
        lua_pushstring(L, SCOPES[o->scope]), lua_setfield(L, -2, "scope");
        lua_pushstring(L, o->doc), lua_setfield(L, -2, "doc");
        push_value(L, o, &dflt), lua_setfield(L, -2, "default");
        if (o->type == DS_OPT_ENUM) {
            lua_newtable(L);
            int n = 0;
            for (const char *p = o->choices;; p += strcspn(p, "|") + 1) {
                lua_pushlstring(L, p, strcspn(p, "|"));
                lua_rawseti(L, -2, ++n);
                if (!p[strcspn(p, "|")]) break;
            }
            lua_setfield(L, -2, "choices");
        } else {
            lua_pushnumber(L, o->lo), lua_setfield(L, -2, "lo");
            lua_pushnumber(L, o->hi), lua_setfield(L, -2, "hi");
        }
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* core.engine_option(name, value, what) -> value as the engine reads it (enum names,
 * 'none' | 'full' | 'every:N', integers, numbers); raises "what: name must be ..., got
 * value" at the script's line when the value does not fit the option. */
static int l_engine_option(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const char *what = luaL_optstring(L, 3, "option");
    const ds_engine_opt *o = ds_engine_opt_named(name);
    if (!o) return ds_lua_raise(L, "%s: no engine option '%s'", what, name);
    ds_engine_opts v;
    ds_engine_opts_init(&v);
    if (o->type == DS_OPT_NUM) *ds_engine_opt_num(o, &v) = ds_lua_engine_opt_num(L, 2, o, what);
    else *ds_engine_opt_int(o, &v) = ds_lua_engine_opt_int(L, 2, o, what);
    push_value(L, o, &v);
    return 1;
}

void ds_lua_open_options(lua_State *L) {
    static const luaL_Reg fns[] = {{"engine_options", l_engine_options},
                                   {"engine_defaults", l_engine_defaults},
                                   {"engine_option", l_engine_option},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
