/* ZeRO in Lua: ds._core.zero_new{stage1, stage2, ..., bucket = elements, prefetch = true}
 * returns the object lua/ds/model.lua calls around each stage's forward and backward
 * and at the step's end (zero.h says the order). Stage indices are 1-based here, as in Lua. The
 * communicator is the context's (ctx->comm), opened on first use as comm.all_reduce
 * does. */
#include <lauxlib.h>

#include <string.h>

#include "ds_lua.h"
#include "lua_engine.h"
#include "zero.h"

#define ZERO_MT "ds.Zero"

typedef struct lua_zero {
    ds_zero *z;
} lua_zero;

static ds_comm *comm_of(lua_State *L) {
    ds_context *ctx = ds_context_of(L);
    if (!ctx) ds_lua_raise(L, "zero: no rank context in this Lua state");
    if (!ctx->comm) {
        ds_err err = {{0}};
        ctx->comm = ds_comm_open(ctx, &err);
        if (!ctx->comm) ds_lua_raise(L, "%s", err.msg);
    }
    return ctx->comm;
}

static ds_zero *check_zero(lua_State *L, int idx) {
    lua_zero *u = luaL_checkudata(L, idx, ZERO_MT);
    if (!u->z) ds_lua_raise(L, "zero: already freed");
    return u->z;
}

static int raise_if(lua_State *L, int rc, const ds_err *err) {
    if (rc != 0) return ds_lua_raise(L, "%s", err->msg);
    return 0;
}

static int l_zero_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    if (n < 1) return ds_lua_raise(L, "zero_new: no stages");
    lua_getfield(L, 1, "bucket");
    lua_Integer bucket = luaL_optinteger(L, -1, 0);
    lua_pop(L, 1);
    if (bucket < 0) return ds_lua_raise(L, "zero_new: bucket = %lld (elements, >= 0)", (long long)bucket);
    lua_getfield(L, 1, "prefetch");
    int prefetch = lua_isnil(L, -1) || lua_toboolean(L, -1);
    lua_pop(L, 1);
    ds_comm *c = comm_of(L);
    ds_stage **st = lua_newuserdatauv(L, (size_t)n * sizeof *st, 0); /* freed by the GC */
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 1, i);
        st[i - 1] = ds_lua_check_stage(L, -1);
        lua_pop(L, 1);
    }
    lua_zero *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->z = NULL;
    luaL_setmetatable(L, ZERO_MT);
    lua_pushvalue(L, 1); /* the stages live as long as this object */
    lua_setiuservalue(L, -2, 1);
    ds_err err = {{0}};
    if (!(u->z = ds_zero_new(c, st, n, (size_t)bucket, &err))) return ds_lua_raise(L, "%s", err.msg);
    u->z->no_prefetch = !prefetch;
    return 1;
}

static int l_zero_gc(lua_State *L) {
    lua_zero *u = luaL_checkudata(L, 1, ZERO_MT);
    ds_zero_free(u->z);
    u->z = NULL;
    return 0;
}

typedef int (*stage_hook)(ds_zero *z, int k, ds_err *err);

static int call_hook(lua_State *L, stage_hook fn) {
    ds_zero *z = check_zero(L, 1);
    int k = (int)luaL_checkinteger(L, 2) - 1;
    ds_err err = {{0}};
    return raise_if(L, fn(z, k, &err), &err);
}

static int l_before_forward(lua_State *L) { return call_hook(L, ds_zero_before_forward); }
static int l_after_forward(lua_State *L) { return call_hook(L, ds_zero_after_forward); }
static int l_before_backward(lua_State *L) { return call_hook(L, ds_zero_before_backward); }
static int l_after_backward(lua_State *L) { return call_hook(L, ds_zero_after_backward); }
static int l_gather_params(lua_State *L) { return call_hook(L, ds_zero_gather_params); }
static int l_store_params(lua_State *L) { return call_hook(L, ds_zero_store_params); }
static int l_masters_to_params(lua_State *L) { return call_hook(L, ds_zero_masters_to_params); }

static int l_release_params(lua_State *L) {
    ds_zero_release_params(check_zero(L, 1), (int)luaL_checkinteger(L, 2) - 1);
    return 0;
}

static int l_zero_grad(lua_State *L) {
    ds_err err = {{0}};
    return raise_if(L, ds_zero_zero_grad(check_zero(L, 1), &err), &err);
}

static int l_reduce(lua_State *L) {
    ds_err err = {{0}};
    return raise_if(L, ds_zero_reduce(check_zero(L, 1), &err), &err);
}

static int l_grad_sumsq(lua_State *L) {
    ds_err err = {{0}};
    double ss = 0;
    raise_if(L, ds_zero_grad_sumsq(check_zero(L, 1), &ss, &err), &err);
    lua_pushnumber(L, ss);
    return 1;
}

static int l_scale_grads(lua_State *L) {
    ds_err err = {{0}};
    return raise_if(L, ds_zero_scale_grads(check_zero(L, 1), (float)luaL_checknumber(L, 2), &err), &err);
}

static int l_barrier(lua_State *L) {
    ds_err err = {{0}};
    return raise_if(L, ds_zero_barrier(check_zero(L, 1), &err), &err);
}

static int l_mean(lua_State *L) {
    ds_err err = {{0}};
    double m = 0;
    raise_if(L, ds_zero_mean(check_zero(L, 1), luaL_checknumber(L, 2), &m, &err), &err);
    lua_pushnumber(L, m);
    return 1;
}

/* zero:adamw{lr=, beta1=, beta2=, eps=, weight_decay=, t=, grad_scale=} */
static int l_adamw(lua_State *L) {
    ds_zero *z = check_zero(L, 1);
    float scale;
    ds_adamw_cfg c = ds_lua_adamw_step(L, 2, "zero:adamw", &scale);
    ds_err err = {{0}};
    return raise_if(L, ds_zero_adamw(z, &c, scale, &err), &err);
}

/* zero:sgd{lr=, momentum=, weight_decay=, grad_scale=} */
static int l_sgd(lua_State *L) {
    ds_zero *z = check_zero(L, 1);
    float scale;
    ds_sgd_cfg c = ds_lua_sgd_step(L, 2, "zero:sgd", &scale);
    ds_err err = {{0}};
    return raise_if(L, ds_zero_sgd(z, &c, scale, &err), &err);
}

/* One range of a logical array as a table {name=, total=, begin=, tensor=} whose tensor
 * views the rank's memory (valid while z lives and the buffer is not re-laid). */
static void push_range(lua_State *L, int zidx, const char *name, ds_tensor *buf, int64_t buf_first,
                       int64_t begin, int64_t end, int64_t total) {
    ds_err err = {{0}};
    int64_t len = end - begin;
    ds_tensor *v = ds_tensor_view(buf->dev, DS_F32, buf->cat, 1, &len,
                                  (float *)buf->data + (begin - buf_first), &err);
    if (!v) ds_lua_raise(L, "%s", err.msg);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)total);
    lua_setfield(L, -2, "total");
    lua_pushinteger(L, (lua_Integer)begin);
    lua_setfield(L, -2, "begin");
    ds_lua_push_tensor_view(L, v, zidx);
    lua_setfield(L, -2, "tensor");
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

static ds_tensor *ensure_vec(lua_State *L, ds_tensor **t, int64_t n) {
    if (*t) return *t;
    ds_err err = {{0}};
    int64_t len = n > 0 ? n : 1;
    if (!(*t = ds_tensor_new(DS_F32, DS_MEM_OPTIMIZER, 1, &len, &err))) ds_lua_raise(L, "%s", err.msg);
    return *t;
}

/* zero:arrays(k, mode [, optimizer]) -> { {name=, total=, begin=, tensor=}, ... }: stage
 * k's model state as logical arrays of its flat length ("params", "adam_m", "adam_v",
 * "momentum"), whatever the ZeRO stage and world size, so a checkpoint reshards:
 *   mode "save": the rank's own range [lo, hi) of each array that exists (together the
 *                ranks cover each array once);
 *   mode "load": every range the rank keeps (the full parameters at ZeRO 0..2, the full
 *                moments at 0), optimizer state for `optimizer` ("adamw" | "sgd")
 *                made if missing. ZeRO-3 windows are closed first (they would be stale).
 * A 16-bit stage's "params" are its fp32 master weights (the truth the working copy is
 * rounded from): after loading them, zero:masters_to_params(k) rounds them into it. */
static int l_arrays(lua_State *L) {
    ds_zero *z = check_zero(L, 1);
    int k = (int)luaL_checkinteger(L, 2) - 1;
    const char *mode = luaL_checkstring(L, 3);
    const char *opt = luaL_optstring(L, 4, "");
    if (k < 0 || k >= z->n) return ds_lua_raise(L, "zero:arrays: stage %d (1..%d)", k + 1, z->n);
    int save = !strcmp(mode, "save");
    if (!save && strcmp(mode, "load")) return ds_lua_raise(L, "zero:arrays: mode '%s' (save|load)", mode);
    ds_zero_stage *zs = &z->st[k];
    ds_stage *s = zs->s;
    int64_t n = (int64_t)s->numel, lo = zs->lo, hi = zs->hi;
    if (!save) ds_zero_release_params(z, k);
    lua_newtable(L);
    /* parameters: a 16-bit stage's are its fp32 master weights */
    ds_err err = {{0}};
    ds_tensor *master = ds_stage_is_half(s) ? ds_zero_master(z, k, &err) : NULL;
    if (ds_stage_is_half(s) && !master) return ds_lua_raise(L, "zero:arrays: %s", err.msg);
    if (master && !zs->shards_optim) push_range(L, 1, "params", master, 0, save ? lo : 0, save ? hi : n, n);
    else if (master) push_range(L, 1, "params", master, lo, lo, hi, n);
    else if (zs->shards_params) push_range(L, 1, "params", zs->param_shard, lo, lo, hi, n);
    else if (save) push_range(L, 1, "params", s->flat_params, 0, lo, hi, n);
    else push_range(L, 1, "params", s->flat_params, 0, 0, n, n);
    /* optimizer state: full at ZeRO 0, the shard above */
    struct { const char *name; ds_tensor **full, **shard; const char *opt; } st[3] = {
        {"adam_m", &s->adam_m, &zs->m, "adamw"},
        {"adam_v", &s->adam_v, &zs->v, "adamw"},
        {"momentum", &s->momentum, &zs->mom, "sgd"}};
    for (int i = 0; i < 3; i++) {
        ds_tensor **t = zs->shards_optim ? st[i].shard : st[i].full;
        if (!save && !strcmp(opt, st[i].opt)) ensure_vec(L, t, zs->shards_optim ? zs->part.shard : n);
        if (!*t) continue;
        if (!zs->shards_optim) push_range(L, 1, st[i].name, *t, 0, save ? lo : 0, save ? hi : n, n);
        else push_range(L, 1, st[i].name, *t, lo, lo, hi, n);
    }
    return 1;
}

static void set_int(lua_State *L, const char *key, long long v) {
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, key);
}

/* zero:info() -> {rank=, world=, bucket=, stages = {{name=, zero=, numel=, shard=,
 * padded=, lo=, hi=}, ...}} (lo, hi: the rank's real elements, 0-based, hi exclusive) */
static int l_info(lua_State *L) {
    ds_zero *z = check_zero(L, 1);
    lua_createtable(L, 0, 4);
    set_int(L, "rank", z->rank);
    set_int(L, "world", z->world);
    set_int(L, "bucket", (long long)z->bucket_elems);
    lua_createtable(L, z->n, 0);
    for (int k = 0; k < z->n; k++) {
        const ds_zero_stage *zs = &z->st[k];
        lua_createtable(L, 0, 7);
        lua_pushstring(L, zs->s->name);
        lua_setfield(L, -2, "name");
        set_int(L, "zero", zs->zero);
        set_int(L, "numel", (long long)zs->part.numel);
        set_int(L, "shard", (long long)zs->part.shard);
        set_int(L, "padded", (long long)zs->part.padded);
        set_int(L, "lo", (long long)zs->lo);
        set_int(L, "hi", (long long)zs->hi);
        lua_rawseti(L, -2, k + 1);
    }
    lua_setfield(L, -2, "stages");
    return 1;
}

void ds_lua_open_zero(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"before_forward", l_before_forward},   {"after_forward", l_after_forward},
        {"before_backward", l_before_backward}, {"after_backward", l_after_backward},
        {"zero_grad", l_zero_grad},             {"reduce", l_reduce},
        {"grad_sumsq", l_grad_sumsq},           {"scale_grads", l_scale_grads},
        {"adamw", l_adamw},                     {"sgd", l_sgd},
        {"mean", l_mean},                       {"barrier", l_barrier},
        {"gather_params", l_gather_params},
        {"release_params", l_release_params},   {"store_params", l_store_params},
        {"info", l_info},                       {"arrays", l_arrays},
        {"masters_to_params", l_masters_to_params},
        {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", l_zero_gc}, {NULL, NULL}};
    ds_lua_new_class(L, ZERO_MT, methods, meta);
    lua_pushcfunction(L, l_zero_new);
    lua_setfield(L, -2, "zero_new");
}
