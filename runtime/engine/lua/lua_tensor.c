/* Tensors in Lua: full userdata of metatable "ds.Tensor". A userdata either owns its
 * ds_tensor (made by ds.tensor or pushed by a loader) or borrows one the engine owns (a
 * stage's output): a borrowed tensor keeps its owner alive through its user value and,
 * like torch7's module.output, always shows the owner's current buffer. */
#include <lauxlib.h>
#include <string.h>

#include "ds_lua.h"
#include "tensor_half.h"
#include "lua_engine.h"

#define TENSOR_MT "ds.Tensor"

typedef struct lua_tensor {
    ds_tensor *t;
    int borrowed;
} lua_tensor;

void ds_lua_push_tensor(lua_State *L, ds_tensor *t) {
    lua_tensor *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->t = t;
    u->borrowed = 0;
    luaL_setmetatable(L, TENSOR_MT);
}

void ds_lua_push_tensor_ref(lua_State *L, ds_tensor *t, int owner_idx) {
    owner_idx = lua_absindex(L, owner_idx);
    lua_tensor *u = lua_newuserdatauv(L, sizeof *u, 1);
    u->t = t;
    u->borrowed = 1;
    luaL_setmetatable(L, TENSOR_MT);
    lua_pushvalue(L, owner_idx);
    lua_setiuservalue(L, -2, 1);
}

void ds_lua_push_tensor_view(lua_State *L, ds_tensor *view, int owner_idx) {
    owner_idx = lua_absindex(L, owner_idx);
    ds_lua_push_tensor(L, view);
    lua_pushvalue(L, owner_idx);
    lua_setiuservalue(L, -2, 1);
}

int ds_lua_tensor_freed(lua_State *L, int idx) {
    lua_tensor *u = luaL_testudata(L, idx, TENSOR_MT);
    return u && !u->t;
}

ds_tensor *ds_lua_check_tensor(lua_State *L, int idx) {
    lua_tensor *u = luaL_checkudata(L, idx, TENSOR_MT);
    if (!u->t) luaL_argerror(L, idx, "tensor was freed");
    return u->t;
}

static int l_gc(lua_State *L) {
    lua_tensor *u = luaL_checkudata(L, 1, TENSOR_MT);
    if (!u->borrowed) ds_tensor_free(u->t);
    u->t = NULL;
    return 0;
}

int ds_lua_check_dtype(lua_State *L, int idx) {
    static const char *const names[] = {"fp32", "bf16", "fp16", "int32", NULL};
    return luaL_checkoption(L, idx, "fp32", names);
}

/* ds.tensor(dtype, d1, d2, ...) or ds.tensor(dtype, {d1, d2, ...}): a zeroed tensor. */
static int l_tensor_new(lua_State *L) {
    ds_dtype dt = (ds_dtype)ds_lua_check_dtype(L, 1);
    int64_t shape[DS_MAX_DIMS];
    int ndim = 0;
    if (lua_istable(L, 2)) {
        ndim = (int)luaL_len(L, 2);
        if (ndim < 1 || ndim > DS_MAX_DIMS)
            return ds_lua_raise(L, "ds.tensor: %d dimensions (1..%d allowed)", ndim, DS_MAX_DIMS);
        for (int i = 0; i < ndim; i++) {
            lua_geti(L, 2, i + 1);
            if (!lua_isinteger(L, -1))
                return ds_lua_raise(L, "ds.tensor: shape[%d] is not an integer", i + 1);
            shape[i] = lua_tointeger(L, -1);
            lua_pop(L, 1);
        }
    } else {
        ndim = lua_gettop(L) - 1;
        if (ndim < 1 || ndim > DS_MAX_DIMS)
            return ds_lua_raise(L, "ds.tensor: %d dimensions (1..%d allowed)", ndim, DS_MAX_DIMS);
        for (int i = 0; i < ndim; i++) shape[i] = luaL_checkinteger(L, i + 2);
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) return ds_lua_raise(L, "ds.tensor: dimension %d has size %d", i + 1, (int)shape[i]);
    ds_err err = {{0}};
    ds_tensor *t = ds_tensor_new(dt, DS_MEM_DATA, ndim, shape, &err);
    if (!t) return ds_lua_raise(L, "ds.tensor: %s", err.msg);
    ds_lua_push_tensor(L, t);
    return 1;
}

static int64_t check_index(lua_State *L, ds_tensor *t, int idx) {
    lua_Integer i = luaL_checkinteger(L, idx);
    if (i < 1 || i > t->numel)
        ds_lua_raise(L, "tensor index %d out of range 1..%d", (int)i, (int)t->numel);
    return i - 1;
}

/* bf16 / fp16 elements read and write as numbers, rounded to nearest even. */
static double get_elem(const ds_tensor *t, int64_t i) {
    float f;
    switch (t->dtype) {
    case DS_F32: return ((const float *)t->data)[i];
    case DS_I32: return ((const int32_t *)t->data)[i];
    case DS_BF16:
    case DS_F16: ds_half_to_f32(ds_half_of(t->dtype), &f, (const uint16_t *)t->data + i, 1); return f;
    }
    return 0;
}

static void set_elem(lua_State *L, ds_tensor *t, int64_t i, int vidx) {
    if (t->dtype == DS_I32) {
        lua_Integer v = luaL_checkinteger(L, vidx);
        if (v < INT32_MIN || v > INT32_MAX) ds_lua_raise(L, "value %d does not fit int32", (int)v);
        ((int32_t *)t->data)[i] = (int32_t)v;
    } else if (t->dtype == DS_F32) {
        ((float *)t->data)[i] = (float)luaL_checknumber(L, vidx);
    } else {
        float f = (float)luaL_checknumber(L, vidx);
        ds_half_from_f32(ds_half_of(t->dtype), (uint16_t *)t->data + i, &f, 1);
    }
}

static int is_float(ds_dtype t) { return t == DS_F32 || t == DS_BF16 || t == DS_F16; }

/* Float tensors of different precisions: through fp32, rounding to the destination's. */
static void convert(ds_tensor *dst, const ds_tensor *src) {
    size_t n = (size_t)dst->numel;
    if (src->dtype == DS_F32) {
        ds_half_from_f32(ds_half_of(dst->dtype), dst->data, src->data, n);
    } else if (dst->dtype == DS_F32) {
        ds_half_to_f32(ds_half_of(src->dtype), dst->data, src->data, n);
    } else { /* bf16 <-> fp16, a block at a time */
        float b[512];
        for (size_t i = 0; i < n; i += 512) {
            size_t k = n - i < 512 ? n - i : 512;
            ds_half_to_f32(ds_half_of(src->dtype), b, (const uint16_t *)src->data + i, k);
            ds_half_from_f32(ds_half_of(dst->dtype), (uint16_t *)dst->data + i, b, k);
        }
    }
}

/* t:get(i): element i (1-based, flat). */
static int l_get(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    int64_t i = check_index(L, t, 2);
    if (t->dtype == DS_I32) lua_pushinteger(L, ((int32_t *)t->data)[i]);
    else lua_pushnumber(L, get_elem(t, i));
    return 1;
}

static int l_set(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    int64_t i = check_index(L, t, 2);
    set_elem(L, t, i, 3);
    return 0;
}

static int l_fill(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    for (int64_t i = 0; i < t->numel; i++) set_elem(L, t, i, 2);
    return 0;
}

/* t:copy(src): the same element count; the same dtype, or float dtypes converted
 * (rounded to nearest even into bf16 / fp16). */
static int l_copy(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    ds_tensor *s = ds_lua_check_tensor(L, 2);
    int convertible = is_float(t->dtype) && is_float(s->dtype);
    if ((t->dtype != s->dtype && !convertible) || t->numel != s->numel)
        return ds_lua_raise(L, "tensor:copy: %s[%d] from %s[%d]", ds_dtype_name(t->dtype),
                          (int)t->numel, ds_dtype_name(s->dtype), (int)s->numel);
    if (t->dtype == s->dtype) memcpy(t->data, s->data, ds_tensor_nbytes(t));
    else convert(t, s);
    return 0;
}

/* t:from_table{...}: fills from a flat Lua array of exactly numel values. */
static int l_from_table(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 2);
    if (n != t->numel)
        return ds_lua_raise(L, "tensor:from_table: %d values for %d elements", (int)n, (int)t->numel);
    for (int64_t i = 0; i < t->numel; i++) {
        lua_geti(L, 2, i + 1);
        set_elem(L, t, i, -1);
        lua_pop(L, 1);
    }
    return 0;
}

static int l_to_table(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    lua_createtable(L, (int)t->numel, 0);
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == DS_I32) lua_pushinteger(L, ((int32_t *)t->data)[i]);
        else lua_pushnumber(L, get_elem(t, i));
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* Sum in double, in index order. */
static int l_sum(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    double s = 0;
    for (int64_t i = 0; i < t->numel; i++) s += get_elem(t, i);
    lua_pushnumber(L, s);
    return 1;
}

/* t:transposed() -> a new 2-D tensor, t's transpose (GPT-2's Conv1D layout <-> ours). */
static int l_transposed(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    if (t->ndim != 2)
        return ds_lua_raise(L, "tensor:transposed: needs a 2-D tensor, got %d-D %s", t->ndim,
                          ds_dtype_name(t->dtype));
    int64_t r = t->shape[0], c = t->shape[1], shape[2] = {c, r};
    ds_err err = {{0}};
    ds_tensor *o = ds_tensor_new(t->dtype, DS_MEM_DATA, 2, shape, &err);
    if (!o) return ds_lua_raise(L, "tensor:transposed: %s", err.msg);
    ds_transpose2d(o->data, t->data, r, c, ds_dtype_size(t->dtype));
    ds_lua_push_tensor(L, o);
    return 1;
}

static int l_shape(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    lua_createtable(L, t->ndim, 0);
    for (int i = 0; i < t->ndim; i++) {
        lua_pushinteger(L, t->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_size(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    lua_Integer d = luaL_checkinteger(L, 2);
    if (d < 1 || d > t->ndim) return ds_lua_raise(L, "tensor:size(%d): tensor has %d dimensions", (int)d, t->ndim);
    lua_pushinteger(L, t->shape[d - 1]);
    return 1;
}

static int l_numel(lua_State *L) {
    lua_pushinteger(L, ds_lua_check_tensor(L, 1)->numel);
    return 1;
}

static int l_dtype(lua_State *L) {
    lua_pushstring(L, ds_dtype_name(ds_lua_check_tensor(L, 1)->dtype));
    return 1;
}

static int l_tostring(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "ds.Tensor(");
    luaL_addstring(&b, ds_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim; i++) {
        lua_pushfstring(L, "%s%d", i ? "x" : ", ", (int)t->shape[i]);
        luaL_addvalue(&b);
    }
    luaL_addstring(&b, ")");
    luaL_pushresult(&b);
    return 1;
}

/* A tensor is what checkpoints save and load (ds_lua_array). */
static void describe_array(lua_State *L, int idx, ds_lua_array *out) {
    ds_tensor *t = ds_lua_check_tensor(L, idx);
    out->dtype = t->dtype;
    out->numel = (size_t)t->numel;
    out->host = t->device == DS_CPU ? t->data : NULL;
}

void ds_lua_open_tensor(lua_State *L) {
    static const ds_lua_array_class array = {describe_array};
    static const luaL_Reg methods[] = {
        {"get", l_get},       {"set", l_set},           {"fill", l_fill},
        {"copy", l_copy},     {"from_table", l_from_table}, {"to_table", l_to_table},
        {"sum", l_sum},       {"shape", l_shape},       {"size", l_size},
        {"numel", l_numel},   {"dtype", l_dtype},       {"transposed", l_transposed},
        {NULL, NULL}};
    static const luaL_Reg meta[] = {{"__gc", l_gc}, {"__tostring", l_tostring}, {NULL, NULL}};
    ds_lua_new_class(L, TENSOR_MT, methods, meta);
    ds_lua_class_array(L, TENSOR_MT, &array);
    lua_pushcfunction(L, l_tensor_new);
    lua_setfield(L, -2, "tensor");
}
