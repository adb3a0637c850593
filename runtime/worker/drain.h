/* Draining: dslaunch asks a job to stop at a step every rank agrees on, with a checkpoint,
 * when a scheduler announces preemption (SIGTERM, SIGUSR1, SIGUSR2 to the controller).
 * The controller sets the store key "drain" (in the attempt's namespace); a script polls
 * with ds.drain_requested([step]) once per step, which every rank calls at the same
 * points: it reads the key and all-reduces the answer, so every rank returns the same
 * value at the same call, and the script saves a checkpoint and ends. The first call
 * tells the controller (key "drain/aware/<rank>") that the script drains; rank 0 records
 * the step it drains at ("drain/step"). Without a store (`dsrun run`) it is always
 * false. */
#ifndef DS_DRAIN_H
#define DS_DRAIN_H

#include <lua.h>

/* Adds drain_requested to the ds._core table on top of the stack. */
void ds_lua_open_drain(lua_State *L);

#endif
