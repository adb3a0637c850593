/* The progress line on the controller's terminal (stderr): step/total, loss, tokens/s,
 * ETA, memory, the slowest rank and restarts. On a terminal it is one line redrawn in
 * place (at most 10 times a second) that rank output scrolls above (the log
 * demultiplexer hides it before writing and shows it after: ds_progress_hide/show); when
 * stderr is not a terminal, a plain line every steps_per_print steps. */
#ifndef DS_PROGRESS_H
#define DS_PROGRESS_H

#include <stddef.h>

#include "metrics.h"

typedef struct ds_progress ds_progress;

/* fd: where it writes; tty: redraw in place; every: steps between plain lines. */
ds_progress *ds_progress_new(int fd, int tty, int every);
/* A new row at elapsed seconds; restarts so far. */
void ds_progress_row(ds_progress *p, const ds_metrics_row *row, double elapsed, int restarts);
/* Around other output on the same terminal (no-ops unless a line is drawn in place). */
void ds_progress_hide(ds_progress *p);
void ds_progress_show(ds_progress *p);
/* The run is over: the last state stays as an ordinary line. */
void ds_progress_end(ds_progress *p);
void ds_progress_free(ds_progress *p);

/* The line for a row (no newline); eta < 0: unknown. Exposed for tests. */
void ds_progress_format(char *buf, size_t cap, const ds_metrics_row *row, double eta, int restarts);
/* "1h02m", "3m05s", "42s" */
void ds_progress_duration(char *buf, size_t cap, double seconds);

#endif
