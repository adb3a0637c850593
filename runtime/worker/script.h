/* Runs a rank's Lua script in its own lua_State with the `ds` library loaded. */
#ifndef DS_SCRIPT_H
#define DS_SCRIPT_H

#include "ds_context.h"

/* Runs `path` with `arg` set from args (arg[0] = path). A Lua error prints
 * "<host>:rank R: message + traceback" on stderr and returns 1; success returns 0. */
int ds_script_run(ds_context *ctx, const char *path, int nargs, char **args);

#endif
