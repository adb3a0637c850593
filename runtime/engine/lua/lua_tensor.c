/* Tensors in Lua: full userdata of metatable "ds.Tensor". A userdata either owns its
 * ds_tensor (made by ds.tensor or pushed by a loader) or borrows one the engine owns (a
 * stage's output): a borrowed tensor keeps its owner alive through its user value and,
 * like torch7's module.output, always shows the owner's current buffer.
 *
 * A script's tensors are host memory; the engine's (a stage's parameters, outputs) are
 * on the rank's device. Methods that read or write elements work on a host image of a
 * device tensor, made with explicit copies (the host never dereferences device memory). */
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
    ds_tensor *t = ds_tensor_new_host(dt, DS_MEM_DATA, ndim, shape, &err);
    if (!t) return ds_lua_raise(L, "ds.tensor: %s", err.msg);
    ds_lua_push_tensor(L, t);
    return 1;
}

/* ---- host images of device tensors ---- */

/* t's elements where the host can read them: t->data, or a copy in a userdata pushed
 * here (the GC frees it, also when a Lua error cuts the method short); image_done
 * writes a copy back to the device when write is set. */
static void *image_of(lua_State *L, const ds_tensor *t) {
    if (ds_tensor_on_host(t)) return t->data;
    void *h = lua_newuserdatauv(L, ds_tensor_nbytes(t) ? ds_tensor_nbytes(t) : 1, 0);
    ds_err err = {{0}};
    if (ds_tensor_to_host(t, 0, (size_t)t->numel, h, &err) != 0) ds_lua_raise(L, "tensor: %s", err.msg);
    return h;
}

static void image_done(lua_State *L, ds_tensor *t, void *h, int write) {
    if (h == t->data || !write) return;
    ds_err err = {{0}};
    if (ds_tensor_from_host(t, 0, (size_t)t->numel, h, &err) != 0) ds_lua_raise(L, "tensor: %s", err.msg);
}

static int64_t check_index(lua_State *L, ds_tensor *t, int idx) {
    lua_Integer i = luaL_checkinteger(L, idx);
    if (i < 1 || i > t->numel)
        ds_lua_raise(L, "tensor index %d out of range 1..%d", (int)i, (int)t->numel);
    return i - 1;
}

/* Element i of host elements h of dtype dt. bf16 / fp16 elements read and write as
 * numbers, rounded to nearest even. */
static double get_elem(ds_dtype dt, const void *h, int64_t i) {
    float f;
    switch (dt) {
    case DS_F32: return ((const float *)h)[i];
    case DS_I32: return ((const int32_t *)h)[i];
    case DS_BF16:
    case DS_F16: ds_half_to_f32(ds_half_of(dt), &f, (const uint16_t *)h + i, 1); return f;
    }
    return 0;
}

static void push_elem(lua_State *L, ds_dtype dt, const void *h, int64_t i) {
    if (dt == DS_I32) lua_pushinteger(L, ((const int32_t *)h)[i]);
    else lua_pushnumber(L, get_elem(dt, h, i));
}

static void set_elem(lua_State *L, ds_dtype dt, void *h, int64_t i, int vidx) {
    if (dt == DS_I32) {
        lua_Integer v = luaL_checkinteger(L, vidx);
        if (v < INT32_MIN || v > INT32_MAX) ds_lua_raise(L, "value %d does not fit int32", (int)v);
        ((int32_t *)h)[i] = (int32_t)v;
    } else if (dt == DS_F32) {
        ((float *)h)[i] = (float)luaL_checknumber(L, vidx);
    } else {
        float f = (float)luaL_checknumber(L, vidx);
        ds_half_from_f32(ds_half_of(dt), (uint16_t *)h + i, &f, 1);
    }
}

static int is_float(ds_dtype t) { return t == DS_F32 || t == DS_BF16 || t == DS_F16; }

/* Float elements of different precisions, host memory: through fp32, rounding to the
 * destination's. */
static void convert(ds_dtype dt, void *dst, ds_dtype st, const void *src, size_t n) {
    if (st == DS_F32) {
        ds_half_from_f32(ds_half_of(dt), dst, src, n);
    } else if (dt == DS_F32) {
        ds_half_to_f32(ds_half_of(st), dst, src, n);
    } else { /* bf16 <-> fp16, a block at a time */
        float b[512];
        for (size_t i = 0; i < n; i += 512) {
            size_t k = n - i < 512 ? n - i : 512;
            ds_half_to_f32(ds_half_of(st), b, (const uint16_t *)src + i, k);
            ds_half_from_f32(ds_half_of(dt), (uint16_t *)dst + i, b, k);
        }
    }
}

/* One element between t (wherever it is) and the host. */
static void elem_io(lua_State *L, ds_tensor *t, int64_t i, void *h, int to_device) {
    ds_err err = {{0}};
    int rc = to_device ? ds_tensor_from_host(t, (size_t)i, 1, h, &err)
                       : ds_tensor_to_host(t, (size_t)i, 1, h, &err);
    if (rc != 0) ds_lua_raise(L, "tensor: %s", err.msg);
}

/* t:get(i): element i (1-based, flat). */
static int l_get(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    int64_t i = check_index(L, t, 2);
    uint32_t e; /* one element, any dtype */
    elem_io(L, t, i, &e, 0);
    push_elem(L, t->dtype, &e, 0);
    return 1;
}

static int l_set(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    int64_t i = check_index(L, t, 2);
    uint32_t e;
    set_elem(L, t->dtype, &e, 0, 3);
    elem_io(L, t, i, &e, 1);
    return 0;
}

static int l_fill(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    void *h = image_of(L, t);
    for (int64_t i = 0; i < t->numel; i++) set_elem(L, t->dtype, h, i, 2);
    image_done(L, t, h, 1);
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
    if (t->dtype == s->dtype && ds_tensor_device(t) == ds_tensor_device(s)) {
        ds_device *d = ds_tensor_device(t);
        d->ops->copy(d, t->data, s->data, ds_tensor_nbytes(t));
        return 0;
    }
    void *hs = image_of(L, s), *ht = image_of(L, t);
    if (t->dtype == s->dtype) memcpy(ht, hs, ds_tensor_nbytes(t));
    else convert(t->dtype, ht, s->dtype, hs, (size_t)t->numel);
    image_done(L, s, hs, 0);
    image_done(L, t, ht, 1);
    return 0;
}

/* t:from_table{...}: fills from a flat Lua array of exactly numel values. */
static int l_from_table(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 2);
    if (n != t->numel)
        return ds_lua_raise(L, "tensor:from_table: %d values for %d elements", (int)n, (int)t->numel);
    void *h = image_of(L, t);
    for (int64_t i = 0; i < t->numel; i++) {
        lua_geti(L, 2, i + 1);
        set_elem(L, t->dtype, h, i, -1);
        lua_pop(L, 1);
    }
    image_done(L, t, h, 1);
    return 0;
}

static int l_to_table(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    void *h = image_of(L, t);
    lua_createtable(L, (int)t->numel, 0);
    for (int64_t i = 0; i < t->numel; i++) {
        push_elem(L, t->dtype, h, i);
        lua_rawseti(L, -2, i + 1);
    }
    image_done(L, t, h, 0);
    return 1;
}

/* Sum in double, in index order. */
static int l_sum(lua_State *L) {
    ds_tensor *t = ds_lua_check_tensor(L, 1);
    void *h = image_of(L, t);
    double s = 0;
    for (int64_t i = 0; i < t->numel; i++) s += get_elem(t->dtype, h, i);
    image_done(L, t, h, 0);
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
    ds_tensor *o = ds_tensor_new_host(t->dtype, DS_MEM_DATA, 2, shape, &err);
    if (!o) return ds_lua_raise(L, "tensor:transposed: %s", err.msg);
    ds_lua_push_tensor(L, o); /* freed by the GC if what follows raises */
    int result = lua_gettop(L);
    void *h = image_of(L, t);
    ds_transpose2d(o->data, h, r, c, ds_dtype_size(t->dtype));
    image_done(L, t, h, 0);
    lua_pushvalue(L, result); /* above the image, if one was pushed */
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
static int array_read(void *obj, size_t first, size_t n, void *dst, ds_err *err) {
    return ds_tensor_to_host(obj, first, n, dst, err);
}

static int array_write(void *obj, size_t first, size_t n, const void *src, ds_err *err) {
    return ds_tensor_from_host(obj, first, n, src, err);
}

static void describe_array(lua_State *L, int idx, ds_lua_array *out) {
    ds_tensor *t = ds_lua_check_tensor(L, idx);
    out->dtype = t->dtype;
    out->numel = (size_t)t->numel;
    out->host = ds_tensor_on_host(t) ? t->data : NULL;
    out->obj = t;
    out->read = array_read;
    out->write = array_write;
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
