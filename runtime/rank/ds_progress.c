#include "ds_progress.h"

#include <pthread.h>
#include <stdio.h>

#include "ds_clock.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long long step = -1;
static const char *op_name, *op_dtype;
static size_t op_count;
static long long op_since;

void ds_progress_step(long long s) {
    pthread_mutex_lock(&mu);
    step = s;
    pthread_mutex_unlock(&mu);
}

void ds_progress_enter(const char *op, size_t count, const char *dtype) {
    long long now = ds_now_ms();
    pthread_mutex_lock(&mu);
    op_name = op;
    op_count = count;
    op_dtype = dtype;
    op_since = now;
    pthread_mutex_unlock(&mu);
}

void ds_progress_leave(void) {
    pthread_mutex_lock(&mu);
    op_name = NULL;
    pthread_mutex_unlock(&mu);
}

void ds_progress_read(ds_progress_snapshot *s) {
    long long now = ds_now_ms();
    pthread_mutex_lock(&mu);
    s->step = step;
    s->op[0] = 0;
    s->op_ms = 0;
    if (op_name) {
        snprintf(s->op, sizeof s->op, "%s of %zu %s", op_name, op_count, op_dtype ? op_dtype : "?");
        s->op_ms = now - op_since;
    }
    pthread_mutex_unlock(&mu);
}
