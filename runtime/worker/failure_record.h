/* The record a rank leaves when it ends by an error: rank, host, when (wall clock, ms),
 * what kind (`load`: the script could not be loaded; `lua`: an error the script did not
 * catch; `setup`: the worker failed before the script ran), the message, the Lua
 * traceback, and whether the rank's communicator had already broken (then the error
 * follows from another rank's failure). One JSON object, written to the descriptor
 * DS_ERROR_FD names (a pipe the agent reads when the rank exits and forwards to the
 * controller, whose summary names the root cause from these records). Without
 * DS_ERROR_FD (`dsrun run`) nothing is written. */
#ifndef DS_FAILURE_RECORD_H
#define DS_FAILURE_RECORD_H

#include <stdint.h>

#include "ds_context.h"
#include "failure_json.h" /* the record's format and its size */

/* Takes the descriptor from DS_ERROR_FD (close-on-exec from now on); without it, writes
 * do nothing. */
void ds_failure_record_open(void);
void ds_failure_record_write(const ds_context *ctx, const char *kind, const char *message,
                             const char *traceback, int64_t at_ms, int transport);

#endif
