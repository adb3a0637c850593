/* Prometheus' pull endpoint, opt-in ([monitor] metrics_port): a thread of the controller
 * serves GET /metrics with the latest text (the exposition format, built by
 * monitor_prom.c) and 404 for anything else, one connection at a time, each given at
 * most DS_PROM_IO_TIMEOUT_MS to send its request and take the answer, so a stuck client
 * cannot hold the endpoint. Listens on loopback unless told otherwise. */
#ifndef DS_PROMETHEUS_H
#define DS_PROMETHEUS_H

#include <stddef.h>

#include "ds_err.h"

#define DS_PROM_IO_TIMEOUT_MS 2000

typedef struct ds_prom ds_prom;

/* Listens on addr:port (port 0: any free port) and starts serving "" until set. */
ds_prom *ds_prom_start(const char *addr, int port, ds_err *err);
/* The port it listens on. */
int ds_prom_port(const ds_prom *p);
/* Replaces the text served (copied). */
void ds_prom_set(ds_prom *p, const char *text, size_t n);
/* Stops the thread and closes the socket (NULL is fine). */
void ds_prom_stop(ds_prom *p);

#endif
