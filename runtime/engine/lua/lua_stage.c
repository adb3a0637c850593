/* Stages in Lua. A stage is built from the layer descriptions lua/ds/nn.lua makes (plain
 * tables with a `kind`); lua_layer_build.c makes the C layers, so after building, forward
 * and backward over a stage are one C call each.
 *
 * Errors name the script line: ds_lua_raise finds the first caller outside the ds
 * library and puts its file:line in front of the message. */
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_lua.h"
#include "lua_engine.h"
#include "lua_layer_build.h"
#include "optim.h"
#include "stage.h"

#define STAGE_MT "ds.Stage"

typedef struct lua_stage {
    ds_stage *s;
} lua_stage;

/* User value slots of a stage userdata. */
enum { UV_KEEP = 1 }; /* table: deps (tied owners), "input" (last forward's input) */

static ds_stage *check_stage(lua_State *L, int idx) {
    lua_stage *u = luaL_checkudata(L, idx, STAGE_MT);
    if (!u->s) luaL_argerror(L, idx, "stage was freed");
    return u->s;
}

ds_stage *ds_lua_check_stage(lua_State *L, int idx) { return check_stage(L, idx); }

/* precision's choices, in the option table's order, are the dtypes of the same index */
_Static_assert(DS_F32 == 0 && DS_BF16 == 1 && DS_F16 == 2, "precision index = ds_dtype");

/* The stage options of the table at idx; those not given are the job's (DS_ENGINE_*). */
static ds_stage_opts read_opts(lua_State *L, int idx) {
    ds_engine_opts v;
    ds_lua_engine_defaults(L, &v);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        const ds_engine_opt *o = &DS_ENGINE_OPTS[i];
        if (o->scope != DS_OPT_STAGE) continue;
        lua_getfield(L, idx, o->name);
        if (!lua_isnil(L, -1)) *ds_engine_opt_int(o, &v) = ds_lua_engine_opt_int(L, -1, o, "stage option");
        lua_pop(L, 1);
        /* ds.Stage resolves 'auto' (its own or the job's) through the planner before a
         * stage is made: one here was made around ds.Stage. */
        if (*ds_engine_opt_int(o, &v) == DS_ENGINE_AUTO)
            ds_lua_raise(L, "stage option %s = auto: only ds.Stage and ds.Model leave it to the "
                            "memory planner (core.stage_new needs a value)", o->name);
    }
    return (ds_stage_opts){(int)v.zero, (int)v.checkpoint, (ds_dtype)v.precision};
}

/* core.stage_new{name=, seed=, zero=, checkpoint=, precision=, describe=, layer1, ...};
 * describe = true: a description for the memory planner (ds_stage_describe). */
static int l_stage_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "name");
    const char *name = lua_isnil(L, -1) ? "stage" : lua_tostring(L, -1);
    if (!name) return ds_lua_raise(L, "stage name must be a string");
    lua_getfield(L, 1, "seed");
    if (!lua_isnil(L, -1) && !lua_isinteger(L, -1))
        return ds_lua_raise(L, "stage seed must be an integer");
    uint64_t seed = (uint64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    ds_stage_opts opts = read_opts(L, 1);
    lua_getfield(L, 1, "describe");
    int describe = lua_toboolean(L, -1);
    lua_pop(L, 1);
    int n = (int)luaL_len(L, 1);
    if (n < 1) return ds_lua_raise(L, "stage '%s' has no layers", name);

    lua_newtable(L);
    int map_idx = lua_gettop(L);
    lua_newtable(L);
    int keep_idx = lua_gettop(L);
    luaL_checkstack(L, 40, "stage");
    ds_layer **layers = calloc((size_t)n, sizeof *layers);
    if (!layers) return ds_lua_raise(L, "out of memory");
    ds_err err = {{0}};
    int i;
    for (i = 0; i < n; i++) {
        lua_geti(L, 1, i + 1);
        if (!lua_istable(L, -1)) {
            ds_err_set(&err, "stage '%s': element %d is a %s, not a layer", name, i + 1,
                       luaL_typename(L, -1));
            lua_pop(L, 1);
            break;
        }
        layers[i] = ds_lua_build_layer(L, lua_gettop(L), map_idx, keep_idx, &err);
        lua_pop(L, 1);
        if (!layers[i]) break;
    }
    if (i < n) {
        for (int j = 0; j < i; j++) ds_layer_free(layers[j]);
        free(layers);
        return ds_lua_raise(L, "%s", err.msg);
    }
    lua_stage *u = lua_newuserdatauv(L, sizeof *u, 1); /* before: a raise here leaks nothing */
    u->s = NULL;
    luaL_setmetatable(L, STAGE_MT);
    int ud = lua_gettop(L);
    ds_stage *s = describe ? ds_stage_describe(name, layers, n, &opts, seed, &err)
                           : ds_stage_new(name, layers, n, &opts, seed, &err);
    free(layers);
    if (!s) return ds_lua_raise(L, "%s", err.msg);
    u->s = s;
    lua_pushvalue(L, keep_idx);
    lua_setiuservalue(L, ud, UV_KEEP);
    /* Mark the descriptions built: later stages can tie to them. */
    lua_pushnil(L);
    while (lua_next(L, map_idx)) {
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, "_built");
        lua_pushvalue(L, ud);
        lua_setfield(L, -3, "_stage");
        lua_pop(L, 1);
    }
    return 1;
}

static int l_stage_gc(lua_State *L) {
    lua_stage *u = luaL_checkudata(L, 1, STAGE_MT);
    ds_stage_free(u->s);
    u->s = NULL;
    return 0;
}

void ds_lua_keep(lua_State *L, int ud, const char *key, int val) {
    lua_getiuservalue(L, ud, UV_KEEP);
    lua_pushvalue(L, val);
    lua_setfield(L, -2, key);
    lua_pop(L, 1);
}

void ds_lua_check_kept(lua_State *L, int ud, const char *key, const char *what) {
    lua_getiuservalue(L, ud, UV_KEEP);
    lua_getfield(L, -1, key);
    if (ds_lua_tensor_freed(L, -1)) ds_lua_raise(L, "%s: %s was freed", what, key);
    lua_pop(L, 2);
}

/* ZeRO-3 keeps only the rank's shard of the parameters outside a stage's forward and
 * backward, ZeRO-2/3 only its shard of the gradients: no full buffer to view then. */
static void check_present(lua_State *L, const ds_stage *s, const ds_tensor *flat, const char *what) {
    if (s->described)
        ds_lua_raise(L, "stage '%s' is a description for the memory planner: it has no %s",
                     s->name, what);
    if (!flat->data)
        ds_lua_raise(L, "stage '%s' (ZeRO-%d) holds only this rank's shard of its %s now: "
                     "read them inside model:with_params(fn)", s->name, s->opts.zero, what);
}

/* stage:forward(x [, train, step, micro, row0]) -> output tensor (owned by the stage;
 * valid until its next forward, like torch7's module.output). row0: global batch row of
 * x's first row (data parallel: rank * local rows), keys dropout. */
static int l_stage_forward(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    ds_tensor *x = ds_lua_check_tensor(L, 2);
    lua_Integer row0 = luaL_optinteger(L, 6, 0);
    if (row0 < 0) return ds_lua_raise(L, "stage:forward: row0 = %d (must be >= 0)", (int)row0);
    ds_run r = {.train = lua_isnone(L, 3) ? 1 : lua_toboolean(L, 3),
                .seed = s->seed,
                .step = (uint32_t)luaL_optinteger(L, 4, 0),
                .micro = (uint32_t)luaL_optinteger(L, 5, 0),
                .row0 = (uint64_t)row0};
    ds_err err = {{0}};
    if (ds_stage_forward(s, x, &r, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    ds_lua_keep(L, 1, "input", 2);
    const ds_tensor *out = ds_stage_output(s);
    if (out == x) lua_pushvalue(L, 2); /* a pass-through (eval dropout): x itself */
    else ds_lua_push_tensor_ref(L, (ds_tensor *)out, 1);
    return 1;
}

/* stage:backward(dout) -> d(input), or nil when the input was token ids. */
static int l_stage_backward(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    ds_tensor *d = ds_lua_check_tensor(L, 2);
    ds_lua_check_kept(L, 1, "input", "stage:backward");
    ds_err err = {{0}};
    if (ds_stage_backward(s, d, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    if (s->last_in->dtype == DS_F32) ds_lua_push_tensor_ref(L, s->grad_in, 1);
    else lua_pushnil(L);
    return 1;
}

/* stage:half_output(on): a 16-bit output (its last Linear's, in the stage's precision)
 * from the next forward on, or fp32 again (ds_stage_half_output) */
static int l_stage_half_output(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    luaL_checktype(L, 2, LUA_TBOOLEAN);
    ds_stage_half_output(s, lua_toboolean(L, 2));
    return 0;
}

static int l_stage_zero_grad(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    ds_stage_zero_grad(s);
    return 0;
}

static int l_stage_release(lua_State *L) {
    ds_stage_release(check_stage(L, 1));
    return 0;
}

static void push_flat_view(lua_State *L, ds_tensor *flat, size_t off, int ndim,
                           const int64_t *shape) {
    if (!flat->data)
        ds_lua_raise(L, "the stage's %s are not resident (released by ZeRO)", ds_mem_cat_name(flat->cat));
    ds_err err = {{0}};
    ds_tensor *v = ds_tensor_view(flat->dev, flat->dtype, flat->cat, ndim, shape, ds_tensor_at(flat, off), &err);
    if (!v) ds_lua_raise(L, "%s", err.msg);
    ds_lua_push_tensor_view(L, v, 1);
}

static int l_stage_params(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_params, "parameters");
    int64_t n = (int64_t)s->numel;
    push_flat_view(L, s->flat_params, 0, 1, &n);
    return 1;
}

static int l_stage_grads(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    int64_t n = (int64_t)s->numel;
    push_flat_view(L, s->flat_grads, 0, 1, &n);
    return 1;
}

/* stage:param_table() -> { {name=, offset= (0-based, elements), numel=, shape={}, decay=}, ... } */
static int l_stage_param_table(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    lua_createtable(L, s->nparams, 0);
    for (int i = 0; i < s->nparams; i++) {
        const ds_param *p = s->params[i];
        lua_createtable(L, 0, 5);
        lua_pushstring(L, p->name);
        lua_setfield(L, -2, "name");
        lua_pushinteger(L, (lua_Integer)p->offset);
        lua_setfield(L, -2, "offset");
        lua_pushinteger(L, (lua_Integer)p->numel);
        lua_setfield(L, -2, "numel");
        lua_pushboolean(L, p->decay);
        lua_setfield(L, -2, "decay");
        lua_createtable(L, p->ndim, 0);
        for (int d = 0; d < p->ndim; d++) {
            lua_pushinteger(L, p->shape[d]);
            lua_rawseti(L, -2, d + 1);
        }
        lua_setfield(L, -2, "shape");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static const ds_param *find_param(lua_State *L, ds_stage *s, int idx) {
    const char *name = luaL_checkstring(L, idx);
    for (int i = 0; i < s->nparams; i++)
        if (!strcmp(s->params[i]->name, name)) return s->params[i];
    ds_lua_raise(L, "stage '%s' has no parameter '%s'", s->name, name);
    return NULL;
}

/* stage:param(name [, "grad"]) -> a view of that parameter (or its gradient), shaped. */
static int l_stage_param(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    const ds_param *p = find_param(L, s, 2);
    int grad = lua_toboolean(L, 3);
    check_present(L, s, grad ? s->flat_grads : s->flat_params, grad ? "gradients" : "parameters");
    push_flat_view(L, grad ? s->flat_grads : s->flat_params, p->offset, p->ndim, p->shape);
    return 1;
}

/* stage:sync_master() after weights were written into a 16-bit stage's working copy
 * outside ZeRO: master weights that exist are made again from it (else the next step
 * would undo the write). No-op for fp32 stages. */
static int l_stage_sync_master(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    ds_err err = {{0}};
    if (ds_stage_refresh_master(s, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    return 0;
}

static int l_stage_info(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    lua_createtable(L, 0, 7);
    lua_pushstring(L, s->name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)s->numel);
    lua_setfield(L, -2, "numel");
    lua_pushinteger(L, s->opts.zero);
    lua_setfield(L, -2, "zero");
    ds_engine_opts v = {.checkpoint = s->opts.checkpoint};
    char ckpt[32]; /* as a script writes it: 'none', 'full', 'every:N' */
    ds_engine_opt_format(&DS_ENGINE_OPTS[DS_EO_checkpoint], &v, ckpt, sizeof ckpt);
    lua_pushstring(L, ckpt);
    lua_setfield(L, -2, "checkpoint");
    lua_pushstring(L, ds_dtype_name(s->opts.precision));
    lua_setfield(L, -2, "precision");
    lua_pushinteger(L, (lua_Integer)s->seed);
    lua_setfield(L, -2, "seed");
    lua_pushboolean(L, s->half_output);
    lua_setfield(L, -2, "half_output");
    return 1;
}

static void opt_range(lua_State *L, ds_stage *s, int t, size_t *lo, size_t *hi) {
    lua_getfield(L, t, "lo");
    lua_getfield(L, t, "hi");
    lua_Integer a = luaL_optinteger(L, -2, 0), b = luaL_optinteger(L, -1, (lua_Integer)s->numel);
    lua_pop(L, 2);
    if (a < 0 || b < a || (size_t)b > s->numel)
        ds_lua_raise(L, "optimizer range [%lld, %lld) outside stage '%s' (0..%zu)", (long long)a,
                     (long long)b, s->name, s->numel);
    *lo = (size_t)a;
    *hi = (size_t)b;
}

/* stage:adamw_step{lr=, beta1=, beta2=, eps=, weight_decay=, t=, [grad_scale=, lo=, hi=]} */
static int l_stage_adamw(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    check_present(L, s, s->flat_params, "parameters");
    float scale;
    ds_adamw_cfg c = ds_lua_adamw_step(L, 2, "stage:adamw_step", &scale);
    size_t lo, hi;
    opt_range(L, s, 2, &lo, &hi);
    ds_err err = {{0}};
    if (ds_adamw_step_scaled(s, lo, hi, &c, scale, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    return 0;
}

/* stage:sgd_step{lr=, momentum=, weight_decay=, [grad_scale=, lo=, hi=]} */
static int l_stage_sgd(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    check_present(L, s, s->flat_params, "parameters");
    float scale;
    ds_sgd_cfg c = ds_lua_sgd_step(L, 2, "stage:sgd_step", &scale);
    size_t lo, hi;
    opt_range(L, s, 2, &lo, &hi);
    ds_err err = {{0}};
    if (ds_sgd_step_scaled(s, lo, hi, &c, scale, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    return 0;
}

static int l_stage_grad_sumsq(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    lua_pushnumber(L, ds_stage_grad_sumsq(s, (size_t)luaL_optinteger(L, 2, 0),
                                          (size_t)luaL_optinteger(L, 3, (lua_Integer)s->numel)));
    return 1;
}

static int l_stage_scale_grads(lua_State *L) {
    ds_stage *s = check_stage(L, 1);
    check_present(L, s, s->flat_grads, "gradients");
    ds_stage_scale_grads(s, (float)luaL_checknumber(L, 2));
    return 0;
}

void ds_lua_open_stage(lua_State *L) {
    static const luaL_Reg stage_methods[] = {
        {"forward", l_stage_forward},       {"backward", l_stage_backward},
        {"zero_grad", l_stage_zero_grad},   {"release", l_stage_release},
        {"params", l_stage_params},         {"grads", l_stage_grads},
        {"param_table", l_stage_param_table}, {"param", l_stage_param},
        {"info", l_stage_info},             {"adamw_step", l_stage_adamw},
        {"sgd_step", l_stage_sgd},          {"grad_sumsq", l_stage_grad_sumsq},
        {"scale_grads", l_stage_scale_grads}, {"sync_master", l_stage_sync_master},
        {"half_output", l_stage_half_output},
        {NULL, NULL}};
    ds_lua_new_class(L, STAGE_MT, stage_methods,
                     (const luaL_Reg[]){{"__gc", l_stage_gc}, {NULL, NULL}});
    lua_pushcfunction(L, l_stage_new);
    lua_setfield(L, -2, "stage_new");
}
