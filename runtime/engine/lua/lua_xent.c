/* The cross-entropy criterion in Lua: core.crossentropy_new() and its methods. Its own
 * userdata and metatable, sharing nothing with stages but the keep-alive helper. */
#include <lauxlib.h>

#include "criterion.h"
#include "ds_lua.h"
#include "lua_engine.h"

#define XENT_MT "ds.CrossEntropy"

enum { UV_KEEP = 1 }; /* table: "logits" and "targets" of the last forward */

typedef struct lua_xent {
    ds_xent *x;
} lua_xent;

/* The criterion at idx, refused once freed: another object's finalizer can use it after
 * its own __gc ran (resurrection), and the debug library can call __gc by hand. */
static ds_xent *check_xent(lua_State *L, int idx) {
    lua_xent *u = luaL_checkudata(L, idx, XENT_MT);
    if (!u->x) luaL_argerror(L, idx, "criterion was freed");
    return u->x;
}

static int l_xent_new(lua_State *L) {
    ds_err err = {{0}};
    lua_xent *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->x = NULL;
    luaL_setmetatable(L, XENT_MT);
    if (!(u->x = ds_xent_new(&err))) return ds_lua_raise(L, "%s", err.msg);
    lua_newtable(L);
    lua_setiuservalue(L, -2, UV_KEEP);
    return 1;
}

static int l_xent_gc(lua_State *L) {
    lua_xent *u = luaL_checkudata(L, 1, XENT_MT);
    ds_xent_free(u->x);
    u->x = NULL;
    return 0;
}

static void keep_inputs(lua_State *L) {
    ds_lua_keep(L, 1, "logits", 2);
    ds_lua_keep(L, 1, "targets", 3);
}

/* The logits tensor of the last forward, as the script passed it: the backward's result
 * is that same object, now holding the gradient. */
static void push_logits(lua_State *L) {
    lua_getiuservalue(L, 1, UV_KEEP);
    lua_getfield(L, -1, "logits");
    lua_remove(L, -2);
}

/* crit:forward(logits, targets) -> mean loss */
static int l_xent_forward(lua_State *L) {
    ds_xent *x = check_xent(L, 1);
    ds_tensor *logits = ds_lua_check_tensor(L, 2), *targets = ds_lua_check_tensor(L, 3);
    double loss;
    ds_err err = {{0}};
    if (ds_xent_forward(x, logits, targets, &loss, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    keep_inputs(L);
    lua_pushnumber(L, loss);
    return 1;
}

/* crit:backward([scale]) -> dlogits: the logits tensor, its values overwritten */
static int l_xent_backward(lua_State *L) {
    ds_xent *x = check_xent(L, 1);
    ds_lua_check_kept(L, 1, "logits", "CrossEntropy:backward");
    ds_lua_check_kept(L, 1, "targets", "CrossEntropy:backward");
    ds_err err = {{0}};
    ds_tensor *dlogits;
    if (ds_xent_backward(x, (float)luaL_optnumber(L, 2, 1.0), &dlogits, &err) != 0)
        return ds_lua_raise(L, "%s", err.msg);
    push_logits(L);
    return 1;
}

/* crit:forward_backward(logits, targets [, scale]) -> mean loss, dlogits (the logits
 * tensor, overwritten): forward then backward in one pass, the same bits. */
static int l_xent_forward_backward(lua_State *L) {
    ds_xent *x = check_xent(L, 1);
    ds_tensor *logits = ds_lua_check_tensor(L, 2), *targets = ds_lua_check_tensor(L, 3);
    double loss;
    ds_err err = {{0}};
    if (ds_xent_forward_backward(x, logits, targets, (float)luaL_optnumber(L, 4, 1.0), &loss,
                                 &err) != 0)
        return ds_lua_raise(L, "%s", err.msg);
    keep_inputs(L);
    lua_pushnumber(L, loss);
    lua_pushvalue(L, 2);
    return 2;
}

static int l_xent_release(lua_State *L) {
    ds_xent_release(check_xent(L, 1));
    return 0;
}

void ds_lua_open_criterion(lua_State *L) {
    static const luaL_Reg xent_methods[] = {{"forward", l_xent_forward},
                                            {"backward", l_xent_backward},
                                            {"forward_backward", l_xent_forward_backward},
                                            {"release", l_xent_release},
                                            {NULL, NULL}};
    ds_lua_new_class(L, XENT_MT, xent_methods,
                     (const luaL_Reg[]){{"__gc", l_xent_gc}, {NULL, NULL}});
    lua_pushcfunction(L, l_xent_new);
    lua_setfield(L, -2, "crossentropy_new");
}
