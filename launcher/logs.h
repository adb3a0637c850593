/* The log demultiplexer: worker output arrives as chunks tagged by rank and stream. The
 * bytes go unchanged to <dir>/rank-R.out and .err; complete lines go to the terminal
 * tagged "[host:rank] " (stdout lines to stdout, stderr lines to stderr), whole lines
 * only (batched per chunk), so no two lines mix, for the ranks the tee filter lets
 * through. A last line
 * without newline is shown when the rank ends; a line longer than DS_LOG_LINE_MAX is
 * shown in pieces of that size. The last lines of each rank's stderr are kept for the
 * failure summary. */
#ifndef DS_LOGS_H
#define DS_LOGS_H

#include <stddef.h>

#include "ds_err.h"
#include "plan.h"

#define DS_LOG_LINE_MAX 65536
#define DS_LOG_TAIL_LINES 10

typedef struct ds_logs ds_logs;

/* Creates dir (and its parents, mode) and every rank's two files (mode without execute
 * bits). tee: "all", "none" or a list like "0,2-3" (NULL = all). */
ds_logs *ds_logs_open(const char *dir, const ds_plan *plan, const char *tee, int mode, ds_err *err);
/* stream: 1 = stdout, 2 = stderr. Ranks outside the plan are ignored. */
void ds_logs_write(ds_logs *l, int rank, int stream, const void *p, size_t n);
/* The rank ended: shows its unterminated last lines. */
void ds_logs_end_rank(ds_logs *l, int rank);
/* Bytes of rank's stream (1 stdout, 2 stderr) that did not reach its file (a full disk:
 * the file stops at the first failed write, and a warning goes to the terminal). */
long long ds_logs_lost(const ds_logs *l, int rank, int stream);
/* The last lines of rank's stderr, oldest first; returns how many (<= DS_LOG_TAIL_LINES). */
int ds_logs_tail(const ds_logs *l, int rank, const char **lines);
void ds_logs_close(ds_logs *l);

/* Calls fn(ctx, 1) before lines go to the terminal and fn(ctx, 0) after (the progress
 * line steps aside for them). */
void ds_logs_on_terminal(ds_logs *l, void (*fn)(void *ctx, int before), void *ctx);

/* Parses a tee filter into show[0..world) (exposed for tests). */
int ds_logs_parse_tee(const char *tee, int world, unsigned char *show, ds_err *err);

#endif
