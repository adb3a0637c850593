/* The fp16 loss scaler in Lua: core.loss_scaler{...} and core.grad_overflow(sumsq).
 * Options and saved states are checked key by key, so a misspelt key is an error
 * instead of a silently ignored default. */
#include <lauxlib.h>
#include <limits.h>
#include <string.h>

#include "ds_lua.h"
#include "loss_scaler.h"
#include "lua_engine.h"

#define SCALER_MT "ds.LossScaler"

static ds_loss_scaler *check_scaler(lua_State *L, int idx) {
    return luaL_checkudata(L, idx, SCALER_MT);
}

/* Field key of table idx into *out; nil leaves *out unless required. */
static void field_num(lua_State *L, int idx, const char *what, const char *key, double *out,
                      int required) {
    lua_getfield(L, idx, key);
    if (lua_type(L, -1) == LUA_TNUMBER) *out = lua_tonumber(L, -1);
    else if (!lua_isnil(L, -1) || required)
        ds_lua_raise(L, "%s: '%s' must be a number, got %s", what, key, luaL_typename(L, -1));
    lua_pop(L, 1);
}

static void field_int(lua_State *L, int idx, const char *what, const char *key, int64_t lo,
                      int64_t hi, int64_t *out, int required) {
    lua_getfield(L, idx, key);
    if (lua_isinteger(L, -1)) {
        lua_Integer v = lua_tointeger(L, -1);
        if (v < lo || v > hi)
            ds_lua_raise(L, "%s: '%s' = %lld is out of range", what, key, (long long)v);
        *out = (int64_t)v;
    } else if (!lua_isnil(L, -1) || required) {
        ds_lua_raise(L, "%s: '%s' must be an integer, got %s", what, key, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
}

static void field_bool(lua_State *L, int idx, const char *what, const char *key, int *out) {
    lua_getfield(L, idx, key);
    if (lua_isboolean(L, -1)) *out = lua_toboolean(L, -1);
    else if (!lua_isnil(L, -1))
        ds_lua_raise(L, "%s: '%s' must be a boolean, got %s", what, key, luaL_typename(L, -1));
    lua_pop(L, 1);
}

/* core.loss_scaler{init_scale=, scale_window=, hysteresis=, min_scale=, scale_factor=,
 *                  consecutive_hysteresis=, raise_error_at_min_scale=} */
static int l_loss_scaler(lua_State *L) {
    static const char *const keys[] = {"init_scale", "scale_window", "hysteresis", "min_scale",
                                       "scale_factor", "consecutive_hysteresis",
                                       "raise_error_at_min_scale", NULL};
    const char *what = "loss_scaler";
    if (lua_isnoneornil(L, 1)) { /* core.loss_scaler() takes every default */
        lua_settop(L, 0);
        lua_newtable(L);
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    const char *bad = ds_lua_unknown_key(L, 1, keys);
    if (bad) return ds_lua_raise(L, "%s: unknown key '%s'", what, bad);
    ds_loss_scaler_cfg c;
    ds_loss_scaler_defaults(&c);
    int64_t hyst = c.hysteresis;
    field_num(L, 1, what, "init_scale", &c.init_scale, 0);
    field_int(L, 1, what, "scale_window", INT64_MIN, INT64_MAX, &c.scale_window, 0);
    field_int(L, 1, what, "hysteresis", INT_MIN, INT_MAX, &hyst, 0);
    field_num(L, 1, what, "min_scale", &c.min_scale, 0);
    field_num(L, 1, what, "scale_factor", &c.scale_factor, 0);
    field_bool(L, 1, what, "consecutive_hysteresis", &c.consecutive_hysteresis);
    field_bool(L, 1, what, "raise_error_at_min_scale", &c.raise_at_min);
    c.hysteresis = (int)hyst;
    ds_loss_scaler tmp;
    ds_err err = {{0}};
    if (ds_loss_scaler_init(&tmp, &c, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    ds_loss_scaler *s = lua_newuserdatauv(L, sizeof *s, 0);
    *s = tmp;
    luaL_setmetatable(L, SCALER_MT);
    return 1;
}

static int l_scale(lua_State *L) {
    lua_pushnumber(L, check_scaler(L, 1)->st.scale);
    return 1;
}

/* s:update(overflow): the step's gradients overflowed (true) or not (false). */
static int l_update(lua_State *L) {
    ds_loss_scaler *s = check_scaler(L, 1);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    ds_err err = {{0}};
    if (ds_loss_scaler_update(s, lua_toboolean(L, 2), &err) != 0)
        return ds_lua_raise(L, "%s", err.msg);
    return 0;
}

/* s:state() -> {scale=, iter=, last_overflow=, hysteresis=}, for a checkpoint. */
static int l_state(lua_State *L) {
    const ds_loss_scaler_state *st = &check_scaler(L, 1)->st;
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, st->scale);
    lua_setfield(L, -2, "scale");
    lua_pushinteger(L, (lua_Integer)st->iter);
    lua_setfield(L, -2, "iter");
    lua_pushinteger(L, (lua_Integer)st->last_overflow);
    lua_setfield(L, -2, "last_overflow");
    lua_pushinteger(L, st->hysteresis_left);
    lua_setfield(L, -2, "hysteresis");
    return 1;
}

/* s:set_state(t): every field of state() is required. */
static int l_set_state(lua_State *L) {
    static const char *const keys[] = {"scale", "iter", "last_overflow", "hysteresis", NULL};
    const char *what = "loss_scaler:set_state";
    ds_loss_scaler *s = check_scaler(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *bad = ds_lua_unknown_key(L, 2, keys);
    if (bad) return ds_lua_raise(L, "%s: unknown key '%s'", what, bad);
    ds_loss_scaler_state st;
    int64_t hyst = 0;
    field_num(L, 2, what, "scale", &st.scale, 1);
    field_int(L, 2, what, "iter", INT64_MIN, INT64_MAX, &st.iter, 1);
    field_int(L, 2, what, "last_overflow", INT64_MIN, INT64_MAX, &st.last_overflow, 1);
    field_int(L, 2, what, "hysteresis", INT_MIN, INT_MAX, &hyst, 1);
    st.hysteresis_left = (int)hyst;
    ds_err err = {{0}};
    if (ds_loss_scaler_set_state(s, &st, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    return 0;
}

/* core.grad_overflow(sumsq) -> true if the gradients' sum of squares is inf or NaN. */
static int l_grad_overflow(lua_State *L) {
    lua_pushboolean(L, ds_loss_scaler_overflow(luaL_checknumber(L, 1)));
    return 1;
}

void ds_lua_open_loss_scaler(lua_State *L) {
    static const luaL_Reg methods[] = {{"scale", l_scale},
                                       {"update", l_update},
                                       {"state", l_state},
                                       {"set_state", l_set_state},
                                       {NULL, NULL}};
    static const luaL_Reg fns[] = {{"loss_scaler", l_loss_scaler},
                                   {"grad_overflow", l_grad_overflow},
                                   {NULL, NULL}};
    ds_lua_new_class(L, SCALER_MT, methods, NULL);
    luaL_setfuncs(L, fns, 0);
}
