/* Reading the layer descriptions lua/ds/nn.lua makes (plain tables with a `kind`) into
 * trees of C layers. Separate from the stage userdata: this is the only code that knows
 * each layer kind's keys, and it never raises (see desc_reader). */
#include <lauxlib.h>
#include <stdio.h>
#include <string.h>

#include "lua_layer_build.h"

/* Reading never raises (a Lua error would leak the C layers built so far): the first
 * problem is kept in err and the build unwinds. */
typedef struct desc_reader {
    lua_State *L;
    int idx;          /* the description table */
    const char *kind;
    char where[96];   /* for messages: "Linear 'c_fc'" */
    ds_err *err;
    int failed;
} desc_reader;

static void bad(desc_reader *d, const char *key, const char *what) {
    if (!d->failed)
        ds_err_set(d->err, "%s: '%s' %s, got %s", d->where, key, what, luaL_typename(d->L, -1));
    d->failed = 1;
}

static int get_int(desc_reader *d, const char *key, int dflt, int required) {
    lua_getfield(d->L, d->idx, key);
    int v = dflt;
    if (lua_isnil(d->L, -1)) {
        if (required) bad(d, key, "is required");
    } else if (!lua_isinteger(d->L, -1) || lua_tointeger(d->L, -1) < -2147483647 ||
               lua_tointeger(d->L, -1) > 2147483647) {
        bad(d, key, "must be an integer");
    } else {
        v = (int)lua_tointeger(d->L, -1);
    }
    lua_pop(d->L, 1);
    return v;
}

static double get_num(desc_reader *d, const char *key, double dflt) {
    lua_getfield(d->L, d->idx, key);
    double v = dflt;
    if (!lua_isnil(d->L, -1)) {
        if (lua_type(d->L, -1) != LUA_TNUMBER) bad(d, key, "must be a number");
        else v = lua_tonumber(d->L, -1);
    }
    lua_pop(d->L, 1);
    return v;
}

static int get_bool(desc_reader *d, const char *key, int dflt) {
    lua_getfield(d->L, d->idx, key);
    int v = dflt;
    if (!lua_isnil(d->L, -1)) {
        if (!lua_isboolean(d->L, -1)) bad(d, key, "must be a boolean");
        else v = lua_toboolean(d->L, -1);
    }
    lua_pop(d->L, 1);
    return v;
}

/* The C layer already built for the description at idx: from this build (map at
 * map_idx) or an earlier stage (its _built field). NULL if not built. */
static ds_layer *built_layer(lua_State *L, int idx, int map_idx) {
    lua_pushvalue(L, idx);
    lua_rawget(L, map_idx);
    ds_layer *l = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (l) return l;
    lua_getfield(L, idx, "_built");
    l = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return l;
}

typedef struct build_ctx {
    lua_State *L;
    int map_idx;  /* desc -> lightuserdata of its C layer, this build */
    int deps_idx; /* stages this one must keep alive (tied parameters) */
} build_ctx;

static ds_layer *build_layer(build_ctx *b, int idx, ds_err *err);

static int build_children(build_ctx *b, ds_layer *parent, int idx, desc_reader *d, ds_err *err) {
    lua_State *L = b->L;
    int n = (int)luaL_len(L, idx);
    for (int i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        if (!lua_istable(L, -1)) {
            ds_err_set(err, "%s: child %d is a %s, not a layer", d->where, i, luaL_typename(L, -1));
            lua_pop(L, 1);
            return -1;
        }
        ds_layer *c = build_layer(b, lua_gettop(L), err);
        lua_pop(L, 1);
        if (!c || ds_layer_add_child(parent, c, err) != 0) {
            ds_layer_free(c);
            return -1;
        }
    }
    return 0;
}

static int tie_linear(build_ctx *b, ds_layer *l, int idx, desc_reader *d, ds_err *err) {
    lua_State *L = b->L;
    lua_getfield(L, idx, "tie");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    int t = lua_gettop(L);
    ds_layer *other = lua_istable(L, t) ? built_layer(L, t, b->map_idx) : NULL;
    if (!other || other->nparam < 1) {
        lua_pop(L, 1);
        return ds_err_set(err, "%s: 'tie' must be a layer with a weight built before this one "
                               "(in an earlier stage, or earlier in this stage)", d->where);
    }
    int rc = ds_layer_tie_param(l, 0, other->param[0], err);
    lua_getfield(L, t, "_stage");
    if (!lua_isnil(L, -1)) { /* keep the owner stage alive */
        lua_pushboolean(L, 1);
        lua_rawset(L, b->deps_idx);
    } else {
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return rc;
}

static ds_layer *make_kind(build_ctx *b, int idx, desc_reader *d, ds_err *err) {
    const char *k = d->kind;
    ds_layer *l = NULL;
    if (!strcmp(k, "Linear")) {
        int in = get_int(d, "in", 0, 1), out = get_int(d, "out", 0, 1);
        int bias = get_bool(d, "bias", 1);
        double std = get_num(d, "std", 0.02);
        if (d->failed || !(l = ds_linear_new(in, out, bias, (float)std, err))) return NULL;
        if (tie_linear(b, l, idx, d, err) != 0) {
            ds_layer_free(l);
            return NULL;
        }
    } else if (!strcmp(k, "Embedding") || !strcmp(k, "PositionEmbedding")) {
        int pos = k[0] == 'P';
        int n = get_int(d, pos ? "context" : "vocab", 0, 1), dim = get_int(d, "d", 0, 1);
        double std = get_num(d, "std", 0.02);
        if (d->failed) return NULL;
        l = pos ? ds_posemb_new(n, dim, (float)std, err) : ds_embedding_new(n, dim, (float)std, err);
    } else if (!strcmp(k, "LayerNorm")) {
        int dim = get_int(d, "d", 0, 1);
        double eps = get_num(d, "eps", 1e-5);
        if (!d->failed) l = ds_layernorm_new(dim, (float)eps, err);
    } else if (!strcmp(k, "GELU")) {
        l = ds_gelu_new(err);
    } else if (!strcmp(k, "Dropout")) {
        double p = get_num(d, "p", 0.0);
        if (!d->failed) l = ds_dropout_new((float)p, err);
    } else if (!strcmp(k, "Attention")) {
        int heads = get_int(d, "heads", 0, 1);
        double p = get_num(d, "p", 0.0);
        if (!d->failed) l = ds_attention_new(heads, (float)p, err);
    } else if (!strcmp(k, "Sequential")) {
        if ((l = ds_sequential_new(err)) && build_children(b, l, idx, d, err) != 0) {
            ds_layer_free(l);
            return NULL;
        }
    } else if (!strcmp(k, "Residual")) {
        ds_layer *inner = ds_sequential_new(err);
        if (!inner) return NULL;
        if (build_children(b, inner, idx, d, err) != 0 || !(l = ds_residual_new(inner, err))) {
            ds_layer_free(inner);
            return NULL;
        }
    } else {
        ds_err_set(err, "unknown layer kind '%s'", k);
    }
    return l;
}

static ds_layer *build_layer(build_ctx *b, int idx, ds_err *err) {
    lua_State *L = b->L;
    luaL_checkstack(L, 16, "layer nesting too deep");
    desc_reader d = {L, idx, NULL, "", err, 0};
    lua_getfield(L, idx, "kind");
    d.kind = lua_tostring(L, -1);
    lua_pop(L, 1); /* the string stays referenced by the table */
    if (!d.kind) return ds_err_set(err, "a layer description has no 'kind'"), NULL;
    lua_getfield(L, idx, "name");
    const char *name = lua_tostring(L, -1);
    snprintf(d.where, sizeof d.where, "%s%s%s%s", d.kind, name ? " '" : "", name ? name : "",
             name ? "'" : "");
    char namebuf[64] = "";
    if (name) {
        if (strlen(name) >= sizeof namebuf) {
            lua_pop(L, 1);
            return ds_err_set(err, "%s: name longer than %zu bytes", d.where, sizeof namebuf - 1), NULL;
        }
        snprintf(namebuf, sizeof namebuf, "%s", name);
    }
    lua_pop(L, 1);
    if (built_layer(L, idx, b->map_idx))
        return ds_err_set(err, "%s is already part of a stage: a layer object is placed once "
                               "(share weights with tie=)", d.where), NULL;
    ds_layer *l = make_kind(b, idx, &d, err);
    if (!l) return NULL;
    snprintf(l->name, sizeof l->name, "%s", namebuf);
    lua_pushvalue(L, idx);
    lua_pushlightuserdata(L, l);
    lua_rawset(L, b->map_idx);
    return l;
}

ds_layer *ds_lua_build_layer(lua_State *L, int idx, int map_idx, int deps_idx, ds_err *err) {
    build_ctx b = {L, map_idx, deps_idx};
    return build_layer(&b, idx, err);
}
