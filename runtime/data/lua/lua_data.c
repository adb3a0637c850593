/* ds.data: token files, the byte-level tokenizer and the training loader in Lua
 * (docs/data.md). Loaders are full userdata of metatable "ds.DataLoader". */
#include <string.h>

#include "bytetok.h"
#include "ds_context.h"
#include "ds_lua.h"
#include "loader.h"
#include "lua_safetensors.h"
#include "lua_engine.h"
#include "tokfile.h"

#define LOADER_MT "ds.DataLoader"

typedef struct lua_loader {
    ds_loader ld;
    int open;
} lua_loader;

/* Reads integer field `name` of the table at idx, in [min, max]; def when absent (an
 * absent field with def < min is required). */
static lua_Integer int_field(lua_State *L, int idx, const char *fn, const char *name,
                             lua_Integer def, lua_Integer min, lua_Integer max) {
    lua_getfield(L, idx, name);
    lua_Integer v = def;
    if (lua_isnil(L, -1) && def < min)
        return ds_lua_raise(L, "%s: option '%s' (an integer >= %lld) is required", fn, name,
                            (long long)min);
    if (!lua_isnil(L, -1)) {
        int ok;
        v = lua_tointegerx(L, -1, &ok);
        if (!ok) return ds_lua_raise(L, "%s: option '%s' must be an integer, got %s", fn, name,
                                   luaL_typename(L, -1));
    }
    lua_pop(L, 1);
    if (v < min || v > max)
        return ds_lua_raise(L, "%s: option '%s' is %lld (%lld..%lld expected)", fn, name,
                            (long long)v, (long long)min, (long long)max);
    return v;
}


static void check_keys(lua_State *L, int idx, const char *fn, const char *const *allowed) {
    const char *bad = ds_lua_unknown_key(L, idx, allowed);
    if (bad) ds_lua_raise(L, "%s: unknown option '%s'", fn, bad);
}

static lua_loader *check_loader(lua_State *L) {
    lua_loader *u = luaL_checkudata(L, 1, LOADER_MT);
    if (!u->open) ds_lua_raise(L, "data loader is closed");
    return u;
}

/* ds.data.open{path=, context=, batch=, seed=0, rank=, world_size=, vocab=, validate=true} */
static int l_open(lua_State *L) {
    static const char *const keys[] = {"path", "context", "batch", "seed", "rank",
                                       "world_size", "vocab", "validate", NULL};
    const char *fn = "ds.data.open";
    luaL_checktype(L, 1, LUA_TTABLE);
    check_keys(L, 1, fn, keys);
    ds_context *ctx = ds_context_of(L);
    ds_loader_opts o = {0};
    lua_getfield(L, 1, "path");
    if (lua_type(L, -1) != LUA_TSTRING)
        return ds_lua_raise(L, "%s: option 'path' (a string) is required", fn);
    o.path = lua_tostring(L, -1); /* stays on the stack until open is done */
    o.context = int_field(L, 1, fn, "context", 0, 1, INT32_MAX);
    o.batch = int_field(L, 1, fn, "batch", 0, 1, INT32_MAX);
    o.seed = (uint64_t)int_field(L, 1, fn, "seed", 0, LUA_MININTEGER, LUA_MAXINTEGER);
    o.world_size = (int)int_field(L, 1, fn, "world_size", ctx ? ctx->world_size : 1, 1, INT32_MAX);
    o.rank = (int)int_field(L, 1, fn, "rank", ctx ? ctx->rank : 0, 0, INT32_MAX);
    o.vocab = (uint32_t)int_field(L, 1, fn, "vocab", 0, 0, INT32_MAX);
    lua_getfield(L, 1, "validate");
    o.validate = lua_isnil(L, -1) ? 1 : lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_loader *u = lua_newuserdatauv(L, sizeof *u, 0);
    u->open = 0;
    luaL_setmetatable(L, LOADER_MT);
    ds_err err = {{0}};
    if (ds_loader_open(&u->ld, &o, &err) != 0) return ds_lua_raise(L, "%s: %s", fn, err.msg);
    u->open = 1;
    return 1;
}

static ds_tensor *new_i32(lua_State *L, int ndim, const int64_t *shape) {
    ds_err err = {{0}};
    ds_tensor *t = ds_tensor_new_host(DS_I32, DS_MEM_DATA, ndim, shape, &err);
    if (!t) ds_lua_raise(L, "%s", err.msg);
    return t;
}

/* data:batch(step, micro) -> x, y: int32 [batch, context] */
static int l_batch(lua_State *L) {
    lua_loader *u = check_loader(L);
    lua_Integer step = luaL_checkinteger(L, 2), micro = luaL_optinteger(L, 3, 0);
    int64_t shape[2] = {u->ld.batch, u->ld.context};
    ds_tensor *x = new_i32(L, 2, shape);
    ds_lua_push_tensor(L, x); /* pushed first, so an error below frees it */
    ds_tensor *y = new_i32(L, 2, shape);
    ds_lua_push_tensor(L, y);
    ds_err err = {{0}};
    if (ds_loader_batch(&u->ld, step, micro, x->data, y->data, &err) != 0)
        return ds_lua_raise(L, "data:batch: %s", err.msg);
    return 2;
}

static int l_window_start(lua_State *L) {
    lua_loader *u = check_loader(L);
    lua_Integer step = luaL_checkinteger(L, 2), micro = luaL_checkinteger(L, 3);
    lua_Integer g = luaL_checkinteger(L, 4);
    if (step < 0 || micro < 0 || g < 0)
        return ds_lua_raise(L, "data:window_start: negative argument");
    lua_pushinteger(L, (lua_Integer)ds_loader_window_start(&u->ld, (uint64_t)step,
                                                            (uint64_t)micro, (uint64_t)g));
    return 1;
}

static int l_ntokens(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)check_loader(L)->ld.tf.count);
    return 1;
}
static int l_vocab(lua_State *L) {
    lua_loader *u = check_loader(L);
    if (u->ld.vocab) lua_pushinteger(L, u->ld.vocab);
    else lua_pushnil(L);
    return 1;
}
static int l_context(lua_State *L) {
    lua_pushinteger(L, check_loader(L)->ld.context);
    return 1;
}
static int l_batch_size(lua_State *L) {
    lua_pushinteger(L, check_loader(L)->ld.batch);
    return 1;
}
static int l_global_batch(lua_State *L) {
    lua_loader *u = check_loader(L);
    lua_pushinteger(L, u->ld.batch * u->ld.world_size);
    return 1;
}
static int l_rank(lua_State *L) {
    lua_pushinteger(L, check_loader(L)->ld.rank);
    return 1;
}
static int l_world_size(lua_State *L) {
    lua_pushinteger(L, check_loader(L)->ld.world_size);
    return 1;
}
static int l_path(lua_State *L) {
    lua_pushstring(L, check_loader(L)->ld.tf.path);
    return 1;
}
static int l_close(lua_State *L) {
    lua_loader *u = luaL_checkudata(L, 1, LOADER_MT);
    if (u->open) ds_loader_close(&u->ld);
    u->open = 0;
    return 0;
}
static int l_tostring(lua_State *L) {
    lua_loader *u = luaL_checkudata(L, 1, LOADER_MT);
    if (!u->open) lua_pushstring(L, "ds.DataLoader (closed)");
    else
        lua_pushfstring(L, "ds.DataLoader(%s: %I tokens, context %I, batch %I x %d ranks)",
                        u->ld.tf.path, (lua_Integer)u->ld.tf.count, (lua_Integer)u->ld.context,
                        (lua_Integer)u->ld.batch, u->ld.world_size);
    return 1;
}

/* Tokens from a Lua sequence of integers or a CPU int32 tensor, into an array that lives
 * in a userdata pushed on the stack (so a Lua error leaks nothing). */
static uint32_t *tokens_arg(lua_State *L, int idx, size_t *n) {
    idx = lua_absindex(L, idx);
    if (lua_istable(L, idx)) {
        lua_Integer len = luaL_len(L, idx);
        uint32_t *t = lua_newuserdatauv(L, ((size_t)len + 1) * sizeof *t, 0);
        for (lua_Integer i = 0; i < len; i++) {
            lua_geti(L, idx, i + 1);
            int ok;
            lua_Integer v = lua_tointegerx(L, -1, &ok);
            lua_pop(L, 1);
            if (!ok || v < 0 || v > UINT32_MAX)
                ds_lua_raise(L, "token %d is not an integer in 0..2^32-1", (int)(i + 1));
            t[i] = (uint32_t)v;
        }
        *n = (size_t)len;
        return t;
    }
    ds_tensor *x = ds_lua_check_tensor(L, idx);
    if (x->dtype != DS_I32 || !ds_tensor_on_host(x))
        luaL_argerror(L, idx, "an int32 host tensor or a table of integers expected");
    uint32_t *t = lua_newuserdatauv(L, ((size_t)x->numel + 1) * sizeof *t, 0);
    const int32_t *d = x->data;
    for (int64_t i = 0; i < x->numel; i++) {
        if (d[i] < 0) ds_lua_raise(L, "token %d at index %d is negative", (int)d[i], (int)i);
        t[i] = (uint32_t)d[i];
    }
    *n = (size_t)x->numel;
    return t;
}

/* ds.data.decode(tokens [, eot_text]) -> string */
static int l_decode(lua_State *L) {
    size_t n;
    const char *eot = luaL_optstring(L, 2, DS_BYTETOK_EOT_TEXT);
    uint32_t *t = tokens_arg(L, 1, &n);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    ds_err err = {{0}};
    for (size_t i = 0; i < n; i++) {
        char byte;
        size_t len;
        const char *piece = ds_bytetok_piece(t[i], eot, &byte, &len, &err);
        if (!piece) return ds_lua_raise(L, "ds.data.decode: index %d: %s", (int)(i + 1), err.msg);
        luaL_addlstring(&b, piece, len);
    }
    luaL_pushresult(&b);
    return 1;
}

/* ds.data.encode(string) -> int32 tensor [#string]: one token per byte, no end-of-text. */
static int l_encode(lua_State *L) {
    size_t n;
    const unsigned char *s = (const unsigned char *)luaL_checklstring(L, 1, &n);
    int64_t shape[1] = {(int64_t)n};
    ds_tensor *t = new_i32(L, 1, shape);
    int32_t *d = t->data;
    for (size_t i = 0; i < n; i++) d[i] = s[i];
    ds_lua_push_tensor(L, t);
    return 1;
}

/* ds.data.write_tokens(path, tokens, {width=2, vocab=257}) -> count */
static int l_write_tokens(lua_State *L) {
    static const char *const keys[] = {"width", "vocab", NULL};
    const char *fn = "ds.data.write_tokens";
    const char *path = luaL_checkstring(L, 1);
    int width = 2;
    lua_Integer vocab = DS_BYTETOK_VOCAB;
    if (!lua_isnoneornil(L, 3)) {
        luaL_checktype(L, 3, LUA_TTABLE);
        check_keys(L, 3, fn, keys);
        width = (int)int_field(L, 3, fn, "width", 2, 2, 4);
        vocab = int_field(L, 3, fn, "vocab", DS_BYTETOK_VOCAB, 0, UINT32_MAX);
    }
    size_t n;
    uint32_t *t = tokens_arg(L, 2, &n);
    ds_err err = {{0}};
    if (ds_tokfile_write(path, t, n, width, (uint32_t)vocab, &err) != 0)
        return ds_lua_raise(L, "%s: %s", fn, err.msg);
    lua_pushinteger(L, (lua_Integer)n);
    return 1;
}

typedef struct tokenize_opts {
    ds_docs_mode mode;
    int any_bytes, width;
} tokenize_opts;

/* {docs="file"|"blank"|"none", bytes=false, width=2} at idx (optional). */
static tokenize_opts check_tokenize_opts(lua_State *L, int idx, const char *fn) {
    static const char *const keys[] = {"docs", "bytes", "width", NULL};
    tokenize_opts o = {DS_DOCS_FILE, 0, 2};
    if (lua_isnoneornil(L, idx)) return o;
    luaL_checktype(L, idx, LUA_TTABLE);
    check_keys(L, idx, fn, keys);
    lua_getfield(L, idx, "docs");
    if (!lua_isnil(L, -1) && (lua_type(L, -1) != LUA_TSTRING ||
                              ds_docs_mode_parse(lua_tostring(L, -1), &o.mode) != 0))
        ds_lua_raise(L, "%s: docs='%s': expected 'file', 'blank' or 'none'", fn,
                   luaL_tolstring(L, -1, NULL));
    lua_getfield(L, idx, "bytes");
    o.any_bytes = lua_toboolean(L, -1);
    lua_pop(L, 2);
    o.width = (int)int_field(L, idx, fn, "width", 2, 2, 4);
    return o;
}

static int put_tokens(void *ctx, const uint32_t *t, size_t n, ds_err *err) {
    return ds_tokwriter_put(ctx, t, n, err);
}

/* ds.data.tokenize(in_path | {in_paths...}, out_path, opts) -> token count; the same as
 * `dsrun tokenize`. */
static int l_tokenize(lua_State *L) {
    const char *fn = "ds.data.tokenize";
    int nin = lua_istable(L, 1) ? (int)luaL_len(L, 1) : 1;
    if (!lua_istable(L, 1)) luaL_checkstring(L, 1);
    const char *out = luaL_checkstring(L, 2);
    tokenize_opts o = check_tokenize_opts(L, 3, fn);
    lua_settop(L, 3);
    for (int i = 1; i <= nin && lua_istable(L, 1); i++)
        if (lua_geti(L, 1, i) != LUA_TSTRING)
            return ds_lua_raise(L, "%s: input %d is not a path", fn, i);
    ds_tokwriter w;
    ds_err err = {{0}};
    if (ds_tokwriter_open(&w, out, o.width, DS_BYTETOK_VOCAB, &err) != 0) goto fail;
    for (int i = 0; i < nin; i++) {
        const char *in = lua_istable(L, 1) ? lua_tostring(L, 4 + i) : lua_tostring(L, 1);
        uint64_t bytes;
        if (ds_bytetok_encode_file(in, o.mode, o.any_bytes, put_tokens, &w, &bytes, &err) != 0)
            goto fail;
    }
    if (ds_tokwriter_close(&w, &err) != 0) goto fail;
    lua_pushinteger(L, (lua_Integer)w.count);
    return 1;
fail:
    ds_tokwriter_abort(&w);
    return ds_lua_raise(L, "%s: %s", fn, err.msg);
}

/* ds.data.write_text(out_path, text, opts) -> token count: a Lua string as one input
 * file of `dsrun tokenize` (generated corpora need no text file on disk). */
static int l_write_text(lua_State *L) {
    const char *fn = "ds.data.write_text";
    const char *out = luaL_checkstring(L, 1);
    size_t n;
    const uint8_t *s = (const uint8_t *)luaL_checklstring(L, 2, &n);
    tokenize_opts o = check_tokenize_opts(L, 3, fn);
    size_t bad;
    if (!o.any_bytes && ds_utf8_validate(s, n, &bad) != 0)
        return ds_lua_raise(L, "%s: invalid UTF-8 at byte offset %d of the text", fn, (int)bad);
    ds_tokwriter w;
    ds_err err = {{0}};
    if (ds_tokwriter_open(&w, out, o.width, DS_BYTETOK_VOCAB, &err) != 0 ||
        ds_bytetok_encode(s, n, o.mode, put_tokens, &w, &err) != 0 ||
        ds_tokwriter_close(&w, &err) != 0) {
        ds_tokwriter_abort(&w);
        return ds_lua_raise(L, "%s: %s", fn, err.msg);
    }
    lua_pushinteger(L, (lua_Integer)w.count);
    return 1;
}

void ds_lua_open_data(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"batch", l_batch},           {"window_start", l_window_start},
        {"ntokens", l_ntokens},       {"vocab", l_vocab},
        {"context", l_context},       {"batch_size", l_batch_size},
        {"global_batch", l_global_batch}, {"rank", l_rank},
        {"world_size", l_world_size}, {"path", l_path},
        {"close", l_close},           {NULL, NULL}};
    static const luaL_Reg fns[] = {
        {"open", l_open},     {"tokenize", l_tokenize}, {"encode", l_encode},
        {"decode", l_decode}, {"write_tokens", l_write_tokens}, {"write_text", l_write_text},
        {NULL, NULL}};
    static const luaL_Reg meta[] = {
        {"__gc", l_close}, {"__close", l_close}, {"__tostring", l_tostring}, {NULL, NULL}};
    ds_lua_new_class(L, LOADER_MT, methods, meta);
    luaL_newlib(L, fns);
    lua_pushinteger(L, DS_BYTETOK_EOT);
    lua_setfield(L, -2, "EOT");
    lua_pushinteger(L, DS_BYTETOK_VOCAB);
    lua_setfield(L, -2, "VOCAB");
    lua_setfield(L, -2, "data");
    ds_lua_open_safetensors(L);
}
