/* Why an attempt failed: the root cause is the earliest failure by the time it happened
 * at its source (a rank's own error or exit time, a node's loss as the controller saw
 * it), not the order the controller heard of them. Failures that follow from another
 * (a rank whose communicator had already broken when it raised its error, a rank
 * stopped by dslaunch's teardown) are consequences: the root cause is the earliest
 * failure that is not one, or, when every failure is, the earliest of all.
 *
 * A rank that ends by a Lua or C error leaves a failure record (JSON, written by the
 * worker: runtime/worker/failure_record.h) which its agent forwards; its time, kind and
 * message make the summary's root cause. */
#ifndef DS_FAILURE_H
#define DS_FAILURE_H

#include "ds_err.h"

typedef struct ds_failure_record {
    char kind[16];     /* "lua", "load", "setup"; "" when the rank left none */
    int transport;     /* its communicator had broken before the error: a consequence */
    long long at_ms;   /* wall clock when the error was raised */
    char *message;     /* malloc'd */
    char *traceback;   /* malloc'd; NULL when none */
} ds_failure_record;

/* Parses a record's JSON into r (which it clears first). -1 with err when the text is not
 * a record. */
int ds_failure_record_parse(ds_failure_record *r, const void *json, size_t n, ds_err *err);
void ds_failure_record_free(ds_failure_record *r);

/* One failure of an attempt, as the root-cause analysis weighs it. */
typedef struct ds_failure {
    int rank;          /* the rank that failed, or -1 (a node, a hang) */
    int node;          /* its node's index in the plan, or -1 */
    long long at_ms;   /* wall clock at the source; 0 when unknown (sorts last) */
    int consequence;   /* follows from another failure */
    int user_error;    /* the job itself is wrong (its script cannot be loaded) */
    char what[1024];   /* one line: "rank 3 on node2 exited with code 3" */
} ds_failure;

/* The index of the root cause among f[0..n), or -1 when n is 0. */
int ds_failure_pick_root(const ds_failure *f, int n);

typedef struct ds_root_cause {
    int found;         /* 0: the attempt did not fail, or nothing explains it */
    ds_failure f;      /* the root cause */
    int nconsequences; /* failures listed as its consequences */
} ds_root_cause;

#endif
