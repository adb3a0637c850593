/* launcher.log: one JSON object per line for every state change of the job, for the
 * operator reading it afterwards and for tools:
 *   {"time":"2026-12-02T11:30:00.123Z","elapsed_s":1.234,"event":"info","message":"..."}
 * "event" is "info" for the running commentary (nodes connecting, ranks started and
 * exited, ...) and one of the kinds below for what a person or a tool acts on; those
 * also go to the webhook ([notify] webhook, notify.h) when one is set:
 *   started          an attempt starts: attempt, world_size, nodes
 *   rank_failed      a rank ended badly: attempt, rank, host, exit_code or signal, error
 *   attempt_failed   an attempt failed: attempt, root_cause {rank, node, what}
 *   hang             attempt, what
 *   node_excluded    host, why
 *   restarting       attempt (the next), restart, max_restarts, in_s
 *   resumed          attempt, step
 *   draining         attempt, signal
 *   drained          step, exit_code
 *   finished         exit_code (0)
 *   failed           exit_code, reason
 * Every object also has "job" (the job id) and "message" (the same in words). */
#ifndef DS_EVENTS_H
#define DS_EVENTS_H

#include "ds_err.h"
#include "ds_json.h"

typedef struct ds_events ds_events;

/* Opens (creates; mode for a new file) path. job_id names the job in every object. */
ds_events *ds_events_open(const char *path, const char *job_id, int mode, ds_err *err);
/* Where events of a kind other than "info" go too (notify.h); NULL: nowhere. */
struct ds_notify;
void ds_events_set_notify(ds_events *ev, struct ds_notify *n);

/* An "info" event. */
void ds_event(ds_events *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A typed event: begin returns the object being built (time, elapsed_s, job and event
 * already in it) for the caller's members; end adds "message" and writes it. Between
 * the two, nothing else may log. begin returns NULL when ev is NULL: end accepts that. */
ds_json *ds_event_begin(ds_events *ev, const char *kind);
void ds_event_end(ds_events *ev, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Bytes that could not be written to launcher.log (a full disk), 0 when all went. */
long long ds_events_lost_bytes(const ds_events *ev);

void ds_events_close(ds_events *ev);

#endif
