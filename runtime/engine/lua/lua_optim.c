/* Optimizer settings from Lua tables, read and checked here only: ds.optim checks a
 * configuration once (core.adamw_config / sgd_config: ranges and unknown keys), and every
 * step (a stage's, a ZeRO object's) reads its table through the same functions (ranges;
 * a step's table may carry other keys, e.g. one table for both kinds of step). */
#include <lauxlib.h>
#include <math.h>
#include <string.h>

#include "ds_lua.h"
#include "lua_engine.h"

#define MAX_KEYS 16
static const char *const ANY_KEYS[] = {NULL}; /* extra: no key is refused */

/* Refuses a key of the table at idx outside keys and extra. */
static void check_keys(lua_State *L, int idx, const char *what, const char *const *keys,
                       const char *const *extra) {
    if (extra == ANY_KEYS) return;
    const char *all[MAX_KEYS];
    int n = 0;
    for (int i = 0; keys[i] && n < MAX_KEYS - 1; i++) all[n++] = keys[i];
    for (int i = 0; extra && extra[i] && n < MAX_KEYS - 1; i++) all[n++] = extra[i];
    all[n] = NULL;
    const char *bad = ds_lua_unknown_key(L, idx, all);
    if (!bad) return;
    char known[400] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof known - 40; i++)
        len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", all[i]);
    ds_lua_raise(L, "%s: unknown option '%s' (known: %s)", what, bad, known);
}

/* Field key of the table at idx, a number in [lo, hi] (hi_open: below hi), or dflt. */
static double num_field(lua_State *L, int idx, const char *what, const char *key, double dflt,
                        double lo, double hi, int hi_open) {
    lua_getfield(L, idx, key);
    double v = dflt;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            ds_lua_raise(L, "%s: '%s' must be a number, got %s", what, key, luaL_tolstring(L, -1, NULL));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    if (!isfinite(v) || v < lo || v > hi || (hi_open && v == hi))
        ds_lua_raise(L, "%s: '%s' = %g outside [%g, %g%s", what, key, v, lo, hi, hi_open ? ")" : "]");
    return v;
}

static const char *const ADAMW_KEYS[] = {"lr", "betas", "beta1", "beta2", "eps", "weight_decay", NULL};
static const char *const SGD_KEYS[] = {"lr", "momentum", "weight_decay", NULL};

/* The settings as the script wrote them (doubles): lr, beta1, beta2, eps, weight_decay. */
static void adamw_values(lua_State *L, int idx, const char *what, const char *const *extra,
                         double v[5]) {
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    check_keys(L, idx, what, ADAMW_KEYS, extra);
    double b1 = 0.9, b2 = 0.999;
    lua_getfield(L, idx, "betas");
    if (!lua_isnil(L, -1)) {
        int ok = lua_istable(L, -1);
        if (ok) {
            lua_geti(L, -1, 1);
            lua_geti(L, -2, 2);
            ok = lua_type(L, -2) == LUA_TNUMBER && lua_type(L, -1) == LUA_TNUMBER;
            b1 = lua_tonumber(L, -2), b2 = lua_tonumber(L, -1);
            lua_pop(L, 2);
        }
        if (!ok || !(b1 >= 0 && b1 < 1) || !(b2 >= 0 && b2 < 1))
            ds_lua_raise(L, "%s: betas must be {b1, b2} with 0 <= b < 1", what);
    }
    lua_pop(L, 1);
    v[0] = num_field(L, idx, what, "lr", 1e-3, 0, HUGE_VAL, 0);
    v[1] = num_field(L, idx, what, "beta1", b1, 0, 1, 1);
    v[2] = num_field(L, idx, what, "beta2", b2, 0, 1, 1);
    v[3] = num_field(L, idx, what, "eps", 1e-8, 0, HUGE_VAL, 0);
    v[4] = num_field(L, idx, what, "weight_decay", 0.0, 0, HUGE_VAL, 0);
}

ds_adamw_cfg ds_lua_adamw_cfg(lua_State *L, int idx, const char *what, const char *const *extra) {
    double v[5];
    adamw_values(L, idx, what, extra, v);
    return (ds_adamw_cfg){(float)v[0], (float)v[1], (float)v[2], (float)v[3], (float)v[4], 1};
}

/* lr, momentum, weight_decay as the script wrote them */
static void sgd_values(lua_State *L, int idx, const char *what, const char *const *extra,
                       double v[3]) {
    idx = lua_absindex(L, idx);
    luaL_checktype(L, idx, LUA_TTABLE);
    check_keys(L, idx, what, SGD_KEYS, extra);
    v[0] = num_field(L, idx, what, "lr", 1e-2, 0, HUGE_VAL, 0);
    v[1] = num_field(L, idx, what, "momentum", 0.0, 0, 1, 0);
    v[2] = num_field(L, idx, what, "weight_decay", 0.0, 0, HUGE_VAL, 0);
}

ds_sgd_cfg ds_lua_sgd_cfg(lua_State *L, int idx, const char *what, const char *const *extra) {
    double v[3];
    sgd_values(L, idx, what, extra, v);
    return (ds_sgd_cfg){(float)v[0], (float)v[1], (float)v[2]};
}

ds_adamw_cfg ds_lua_adamw_step(lua_State *L, int idx, const char *what, float *grad_scale) {
    ds_adamw_cfg c = ds_lua_adamw_cfg(L, idx, what, ANY_KEYS);
    *grad_scale = (float)num_field(L, idx, what, "grad_scale", 1.0, 0, HUGE_VAL, 0);
    lua_getfield(L, idx, "t");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1 || lua_tointeger(L, -1) > INT32_MAX)
        ds_lua_raise(L, "%s: step t must be an integer >= 1 (1-based), got %s", what,
                     luaL_tolstring(L, -1, NULL));
    c.t = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    return c;
}

ds_sgd_cfg ds_lua_sgd_step(lua_State *L, int idx, const char *what, float *grad_scale) {
    ds_sgd_cfg c = ds_lua_sgd_cfg(L, idx, what, ANY_KEYS);
    *grad_scale = (float)num_field(L, idx, what, "grad_scale", 1.0, 0, HUGE_VAL, 0);
    return c;
}

static void set_num(lua_State *L, const char *key, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, key);
}

/* core.adamw_config(t [, what]) -> {lr=, beta1=, beta2=, eps=, weight_decay=}, checked */
static int l_adamw_config(lua_State *L) {
    double v[5];
    adamw_values(L, 1, luaL_optstring(L, 2, "adamw"), NULL, v);
    lua_createtable(L, 0, 5);
    set_num(L, "lr", v[0]), set_num(L, "beta1", v[1]), set_num(L, "beta2", v[2]);
    set_num(L, "eps", v[3]), set_num(L, "weight_decay", v[4]);
    return 1;
}

/* core.sgd_config(t [, what]) -> {lr=, momentum=, weight_decay=}, checked */
static int l_sgd_config(lua_State *L) {
    double v[3];
    sgd_values(L, 1, luaL_optstring(L, 2, "sgd"), NULL, v);
    lua_createtable(L, 0, 3);
    set_num(L, "lr", v[0]), set_num(L, "momentum", v[1]), set_num(L, "weight_decay", v[2]);
    return 1;
}

void ds_lua_open_optim(lua_State *L) {
    static const luaL_Reg fns[] = {{"adamw_config", l_adamw_config},
                                   {"sgd_config", l_sgd_config},
                                   {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}
