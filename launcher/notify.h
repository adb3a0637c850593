/* The webhook ([notify] webhook = URL): every typed event (events.h) is POSTed there as
 * its JSON object (Content-Type: application/json), by a thread of its own, so the job
 * never waits for it. Each POST gets [notify] timeout (default 5 s) and up to 3 tries
 * (0.5 s, then 1 s apart) for a connection error or a 5xx answer; an event that still
 * does not go through is dropped, and the first time that happens dslaunch warns on the
 * terminal (launcher.log keeps every event anyway). At the end of the run the events
 * still queued get a last chance of at most [notify] timeout in all. */
#ifndef DS_NOTIFY_H
#define DS_NOTIFY_H

#include "ds_err.h"

typedef struct ds_notify ds_notify;

/* Starts the sender for url (http or https). */
ds_notify *ds_notify_start(const char *url, int timeout_ms, ds_err *err);
/* Queues a copy of json; never blocks (beyond a mutex). */
void ds_notify_post(ds_notify *n, const char *json);
/* Sends what is queued (bounded by the timeout), stops the thread, frees. NULL is
 * allowed. Returns how many events were dropped. */
int ds_notify_stop(ds_notify *n);

#endif
