/* launcher.log: one timestamped line per state change of the job (nodes connected,
 * ranks started and exited, failures, stop), for the operator reading it afterwards. */
#ifndef DS_EVENTS_H
#define DS_EVENTS_H

#include "ds_err.h"

typedef struct ds_events ds_events;

/* Opens (truncates) path. */
ds_events *ds_events_open(const char *path, ds_err *err);
/* "2026-12-02T11:30:00.123Z +1.234s message\n", flushed at once (a crash loses nothing). */
void ds_event(ds_events *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ds_events_close(ds_events *ev);

#endif
