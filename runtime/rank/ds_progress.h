/* What this rank is doing, for the controller's hang detection: the training step the
 * engine is on, and the collective the rank waits in (if any) and since when. The rank's
 * main thread writes it (the engine's train_step, comm's waits: a few stores, no
 * system call); the progress reporter (runtime/worker/progress_reporter.h) reads it from
 * its own thread and publishes it through the store. */
#ifndef DS_RANK_PROGRESS_H
#define DS_RANK_PROGRESS_H

#include <stddef.h>

/* The step the engine started (-1 before the first). */
void ds_progress_step(long long step);
/* The rank waits in a collective: op and dtype are static strings ("allreduce", "fp32"). */
void ds_progress_enter(const char *op, size_t count, const char *dtype);
void ds_progress_leave(void);

typedef struct ds_progress_snapshot {
    long long step;
    char op[96];          /* "allreduce of 1024 fp32", or "" when in none */
    long long op_ms;      /* how long it has waited in it */
} ds_progress_snapshot;

void ds_progress_read(ds_progress_snapshot *s);

#endif
