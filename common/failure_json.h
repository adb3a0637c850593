/* The failure record's wire format (what a rank that ends by an error leaves for the
 * controller: runtime/worker/failure_record.h; a program rank's PyTorch error file as its
 * agent turns it into one: runtime/agent/error_file.h; read by launcher/failure.c). One
 * JSON object: rank, host, time_ms, kind, transport, message, traceback. */
#ifndef DS_FAILURE_JSON_H
#define DS_FAILURE_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "ds_json.h"

/* The most a record takes: the agent reads it from a pipe once the rank has exited, so
 * it must fit in the pipe's buffer (64 KiB on Linux). Message and traceback are cut to
 * these, which even fully escaped stays below it. */
#define DS_FAILURE_RECORD_MAX 60000
#define DS_FAILURE_MESSAGE_MAX 2048
#define DS_FAILURE_TRACEBACK_MAX 4096

/* Writes the record into j (ds_json_init_buf'd by the caller); message and traceback
 * (NULL: left out) are given with their lengths and cut to their caps, head kept. */
void ds_failure_json(ds_json *j, int rank, const char *host, int64_t at_ms, const char *kind, int transport,
                     const char *message, size_t message_len, const char *traceback, size_t traceback_len);

#endif
