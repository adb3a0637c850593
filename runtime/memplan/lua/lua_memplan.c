/* The memory planner in Lua: ds._core.memplan_predict(stages, choices, job) returns one
 * prediction (memplan.h) as a table; lua/ds/memplan.lua builds the planner's commands on
 * it (the report, every combination, the choice). */
#include <lauxlib.h>

#include <string.h>

#include "ds_lua.h"
#include "lua_engine.h"
#include "memplan.h"
#include "zero.h"

static int int_field(lua_State *L, int t, const char *k, int dflt) {
    lua_getfield(L, t, k);
    lua_Integer v = lua_isnil(L, -1) ? dflt : luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    return (int)v;
}

static double num_field(lua_State *L, int t, const char *k) {
    lua_getfield(L, t, k);
    double v = lua_isnil(L, -1) ? 0 : luaL_checknumber(L, -1);
    lua_pop(L, 1);
    return v;
}

static int bool_field(lua_State *L, int t, const char *k, int dflt) {
    lua_getfield(L, t, k);
    int v = lua_isnil(L, -1) ? dflt : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return v;
}

/* One stage option of a choice table (as a script writes it: 2, 'full', 'bf16'). */
static int choice_opt(lua_State *L, int t, int eo, const char *what) {
    const ds_engine_opt *o = &DS_ENGINE_OPTS[eo];
    lua_getfield(L, t, o->name);
    if (lua_isnil(L, -1)) return ds_lua_raise(L, "%s: %s is missing", what, o->name);
    int v = (int)ds_lua_engine_opt_int(L, -1, o, what);
    lua_pop(L, 1);
    return v;
}

static void read_job(lua_State *L, int t, ds_mp_job *job) {
    luaL_checktype(L, t, LUA_TTABLE);
    job->world = int_field(L, t, "world", 1);
    job->accum = int_field(L, t, "accum", 1);
    job->bucket_elems = int_field(L, t, "bucket", 0);
    job->prefetch = bool_field(L, t, "prefetch", 1);
    job->host_device = bool_field(L, t, "host_device", 1);
    job->gloo = bool_field(L, t, "gloo", 1);
    job->gemm16 = bool_field(L, t, "gemm16_half", 0) ? DS_GEMM16_HALF : DS_GEMM16_F32;
    job->attn16 = bool_field(L, t, "attention16_half", 0) ? DS_ATTN16_HALF : DS_ATTN16_F32;
    job->gemm_flops = num_field(L, t, "gemm_flops");
    job->link_bytes_s = num_field(L, t, "link_bytes_s");
    lua_getfield(L, t, "optim");
    const char *o = luaL_optstring(L, -1, "adamw");
    if (strcmp(o, "adamw") && strcmp(o, "sgd")) ds_lua_raise(L, "planner: optim '%s' (adamw or sgd)", o);
    job->optim = !strcmp(o, "sgd") ? DS_MP_SGD : DS_MP_ADAMW;
    lua_pop(L, 1);
    lua_getfield(L, t, "batch_dtype");
    const char *bd = luaL_optstring(L, -1, "int32");
    if (strcmp(bd, "int32") && strcmp(bd, "fp32")) ds_lua_raise(L, "planner: batch_dtype '%s' (int32 or fp32)", bd);
    job->batch_dtype = !strcmp(bd, "fp32") ? DS_F32 : DS_I32;
    lua_pop(L, 1);
    lua_getfield(L, t, "batch");
    if (!lua_istable(L, -1)) ds_lua_raise(L, "planner: job.batch must be the input's shape {B, T}");
    job->batch_ndim = (int)luaL_len(L, -1);
    if (job->batch_ndim < 1 || job->batch_ndim > 3) ds_lua_raise(L, "planner: job.batch has %d dimensions (1..3)", job->batch_ndim);
    for (int i = 0; i < job->batch_ndim; i++) {
        lua_geti(L, -1, i + 1);
        job->batch[i] = luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, t, "targets");
    job->targets = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
}

static void set_int(lua_State *L, const char *k, size_t v) {
    lua_pushinteger(L, (lua_Integer)v);
    lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
}

static void push_pred(lua_State *L, const ds_mp_pred *p) {
    lua_createtable(L, 0, 8);
    set_int(L, "total_peak", p->total_peak);
    lua_pushstring(L, p->peak_at);
    lua_setfield(L, -2, "peak_at");
    set_num(L, "flops", p->flops);
    set_num(L, "recompute_flops", p->recompute_flops);
    set_num(L, "comm_bytes", p->comm_bytes);
    set_num(L, "step_s", p->step_s);
    lua_createtable(L, DS_MP_NLINES, 0);
    for (int l = 0; l < DS_MP_NLINES; l++) {
        lua_createtable(L, 0, 5);
        lua_pushstring(L, ds_mp_line_name((ds_mp_line)l));
        lua_setfield(L, -2, "name");
        lua_pushstring(L, ds_mem_cat_name(ds_mp_line_cat((ds_mp_line)l)));
        lua_setfield(L, -2, "category");
        lua_pushstring(L, ds_mp_line_formula((ds_mp_line)l));
        lua_setfield(L, -2, "formula");
        set_int(L, "at_peak", p->line_at_peak[l]);
        set_int(L, "peak", p->line_peak[l]);
        lua_rawseti(L, -2, l + 1);
    }
    lua_setfield(L, -2, "lines");
    lua_createtable(L, 0, DS_MEM_NCAT);
    for (int c = 0; c < DS_MEM_NCAT; c++) {
        lua_createtable(L, 0, 3);
        set_int(L, "peak", p->cat_peak[c]);
        set_int(L, "at_peak", p->cat_at_peak[c]);
        set_int(L, "after", p->cat_after[c]);
        lua_setfield(L, -2, ds_mem_cat_name((ds_mem_cat)c));
    }
    lua_setfield(L, -2, "categories");
}

/* memplan_predict({stage, ...}, {{zero=, checkpoint=, precision=}, ...}, job [, steps]) */
static int l_memplan_predict(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    int n = (int)luaL_len(L, 1);
    if (n < 1) return ds_lua_raise(L, "planner: no stages");
    if ((int)luaL_len(L, 2) != n) return ds_lua_raise(L, "planner: %d stages, %d choices", n, (int)luaL_len(L, 2));
    ds_mp_job job = {0};
    read_job(L, 3, &job);
    int steps = (int)luaL_optinteger(L, 4, 2);
    ds_stage **st = lua_newuserdatauv(L, (size_t)n * (sizeof *st + sizeof(ds_mp_choice)), 0);
    ds_mp_choice *ch = (ds_mp_choice *)(st + n);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, 1, i);
        st[i - 1] = ds_lua_check_stage(L, -1);
        lua_pop(L, 1);
        lua_geti(L, 2, i);
        luaL_checktype(L, -1, LUA_TTABLE);
        int t = lua_gettop(L);
        ch[i - 1] = (ds_mp_choice){choice_opt(L, t, DS_EO_zero, "planner choice"),
                                   choice_opt(L, t, DS_EO_checkpoint, "planner choice"),
                                   choice_opt(L, t, DS_EO_precision, "planner choice")};
        lua_pop(L, 1);
    }
    ds_mp_model m = {st, n};
    ds_mp_pred p;
    ds_err err = {{0}};
    if (ds_mp_predict(&m, ch, &job, steps, &p, &err) != 0) return ds_lua_raise(L, "%s", err.msg);
    push_pred(L, &p);
    return 1;
}

void ds_lua_open_memplan(lua_State *L) {
    lua_pushcfunction(L, l_memplan_predict);
    lua_setfield(L, -2, "memplan_predict");
}
