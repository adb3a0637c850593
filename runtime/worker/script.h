/* Runs a rank's Lua script in its own lua_State with the `ds` library loaded. */
#ifndef DS_SCRIPT_H
#define DS_SCRIPT_H

#include "ds_context.h"

/* The exit status of a rank whose script cannot be loaded (missing, unreadable, a
 * syntax error): a user error, which a restart would only repeat. */
#define DS_SCRIPT_LOAD_FAILED 2

/* Runs `path` with `arg` set from args (arg[0] = path). A Lua error prints
 * "<host>:rank R: message + traceback" on stderr, leaves a failure record
 * (failure_record.h) and returns 1; a script that cannot be loaded returns
 * DS_SCRIPT_LOAD_FAILED; success returns 0. */
int ds_script_run(ds_context *ctx, const char *path, int nargs, char **args);

#endif
