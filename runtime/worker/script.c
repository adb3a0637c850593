#include "script.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "drain.h"
#include "ds_progress.h"
#include "ds_clock.h"
#include "ds_lua.h"
#include "failure_record.h"
#include "lua_ckpt.h"
#include "metrics_pipe.h"

static int l_rank(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->rank);
    return 1;
}
static int l_world_size(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->world_size);
    return 1;
}
static int l_local_rank(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->local_rank);
    return 1;
}
static int l_local_world_size(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->local_world_size);
    return 1;
}
static int l_node_rank(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->node_rank);
    return 1;
}
static int l_attempt(lua_State *L) {
    lua_pushinteger(L, ds_context_of(L)->attempt);
    return 1;
}
static int l_host(lua_State *L) {
    lua_pushstring(L, ds_context_of(L)->host);
    return 1;
}
static int l_job_id(lua_State *L) {
    lua_pushstring(L, ds_context_of(L)->job_id);
    return 1;
}
/* The engine's step, for the controller's hang detection (ds_progress.h). */
static int l_report_step(lua_State *L) {
    ds_progress_step((long long)luaL_checkinteger(L, 1));
    return 0;
}

/* monitor_publish(line) -> true when sent to the controller, false when there is no
 * channel (`dsrun run`), or nil and a message when the channel failed. */
static int l_monitor_publish(lua_State *L) {
    size_t n;
    const char *line = luaL_checklstring(L, 1, &n);
    if (memchr(line, '\n', n)) return luaL_argerror(L, 1, "a record is one line");
    ds_err err = {{0}};
    int rc = ds_metrics_pipe_send(line, n, &err);
    if (rc < 0) {
        lua_pushnil(L);
        lua_pushstring(L, err.msg);
        return 2;
    }
    lua_pushboolean(L, rc == 0);
    return 1;
}

void ds_lua_open_runtime(lua_State *L) {
    static const luaL_Reg fns[] = {
        {"rank", l_rank},         {"world_size", l_world_size},
        {"local_rank", l_local_rank}, {"local_world_size", l_local_world_size},
        {"node_rank", l_node_rank}, {"attempt", l_attempt},
        {"host", l_host},         {"job_id", l_job_id},
        {"monitor_publish", l_monitor_publish},
        {"report_step", l_report_step},
        {NULL, NULL}};
    luaL_setfuncs(L, fns, 0);
}

static int luaopen_ds_core(lua_State *L) {
    lua_newtable(L);
    ds_lua_open_runtime(L);
    ds_lua_open_store(L);
    ds_lua_open_engine(L);
    ds_lua_open_data(L);
    ds_lua_open_comm(L);
    ds_lua_open_zero(L);
    ds_lua_open_memplan(L);
    ds_lua_open_ckpt(L);
    ds_lua_open_drain(L);
    return 1;
}

/* What the message handler saw of the error that ended the script. */
typedef struct script_error {
    int64_t at_ms;  /* wall clock when it was raised: its time at the source */
    int transport;  /* the communicator had already broken: a consequence */
} script_error;

/* Message handler: adds the traceback so a script error names the script line, and
 * notes when the error happened (before lua_close's finalizers run, which may take a
 * while on a broken communicator). */
static int msgh(lua_State *L) {
    script_error *e = lua_touserdata(L, lua_upvalueindex(1));
    ds_context *ctx = ds_context_of(L);
    e->at_ms = ds_wall_ms();
    e->transport = ctx && ctx->comm && ds_comm_is_broken(ctx->comm);
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = luaL_tolstring(L, 1, NULL);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Splits "message\nstack traceback:\n..." for the failure record. */
static void record_lua_error(const ds_context *ctx, const char *text, const script_error *e) {
    const char *tb = strstr(text, "\nstack traceback:");
    char *msg = strndup(text, tb ? (size_t)(tb - text) : strlen(text));
    ds_failure_record_write(ctx, "lua", msg ? msg : text, tb ? tb + 1 : NULL, e->at_ms, e->transport);
    free(msg);
}

static void set_package_path(lua_State *L) {
    const char *dir = getenv("DS_LUA_DIR");
    if (!dir || !dir[0]) dir = DS_LUA_DIR;
    lua_getglobal(L, "package");
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir, lua_tostring(L, -1));
    lua_setfield(L, -3, "path");
    lua_pop(L, 1);
    lua_getfield(L, -1, "preload");
    lua_pushcfunction(L, luaopen_ds_core);
    lua_setfield(L, -2, "ds._core");
    lua_pop(L, 2);
}

int ds_script_run(ds_context *ctx, const char *path, int nargs, char **args) {
    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "%s:rank %d: cannot create a Lua state (out of memory)\n", ctx->host,
                ctx->rank);
        return 1;
    }
    luaL_openlibs(L);
    ds_context_attach(L, ctx);
    set_package_path(L);

    lua_createtable(L, nargs, 1);
    lua_pushstring(L, path);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < nargs; i++) {
        lua_pushstring(L, args[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, "arg");

    int status = EXIT_SUCCESS;
    script_error e = {0};
    lua_pushlightuserdata(L, &e);
    lua_pushcclosure(L, msgh, 1);
    if (luaL_loadfile(L, path) != LUA_OK) {
        fprintf(stderr, "%s:rank %d: %s\n", ctx->host, ctx->rank, lua_tostring(L, -1));
        ds_failure_record_write(ctx, "load", lua_tostring(L, -1), NULL, ds_wall_ms(), 0);
        status = DS_SCRIPT_LOAD_FAILED;
    } else if (lua_pcall(L, 0, 0, -2) != LUA_OK) {
        const char *text = lua_tostring(L, -1) ? lua_tostring(L, -1) : "(error object is not a string)";
        fprintf(stderr, "%s:rank %d: %s\n", ctx->host, ctx->rank, text);
        fflush(stderr);
        record_lua_error(ctx, text, &e);
        status = EXIT_FAILURE;
    }
    lua_close(L);
    fflush(stdout);
    return status;
}
