/* The project's one clock for timeouts, deadlines, heartbeats and event times:
 * CLOCK_MONOTONIC, which never jumps when the wall clock is set. */
#ifndef DS_CLOCK_H
#define DS_CLOCK_H

#include <stdint.h>

int64_t ds_now_ms(void);
double ds_now_s(void); /* the same clock in seconds, with nanosecond resolution */
/* CLOCK_REALTIME in milliseconds since the epoch: only for times compared across
 * processes and machines (when a failure happened at its source), never for deadlines. */
int64_t ds_wall_ms(void);

#endif
