/* Errors are returned, not printed: a failing function fills a ds_err with a message
 * that carries its context (file:line for user input, rank and host at run time) and
 * returns -1; callers add their own context with ds_err_prefix on the way up. */
#ifndef DS_ERR_H
#define DS_ERR_H

#include <stddef.h>

typedef struct ds_err {
    char msg[1024];
} ds_err;

/* Sets the message (printf-style) and returns -1, so `return ds_err_set(e, ...)` reads
 * as the error path it is. A NULL e is allowed and ignored. */
int ds_err_set(ds_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prepends "<context>: " to the message already in e; returns -1. */
int ds_err_prefix(ds_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends ": strerror(errnum)". Returns -1. */
int ds_err_errno(ds_err *e, int errnum, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
