#include "ds_err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ds_err_set(ds_err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int ds_err_prefix(ds_err *e, const char *fmt, ...) {
    if (!e) return -1;
    char prefix[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix - 2, fmt, ap);
    va_end(ap);
    strcat(prefix, ": ");
    /* Shift the old message right, truncating its tail when the whole is too long. */
    size_t plen = strlen(prefix), cap = sizeof e->msg;
    size_t olen = strnlen(e->msg, cap - 1);
    if (plen >= cap) plen = cap - 1;
    if (plen + olen >= cap) olen = cap - 1 - plen;
    memmove(e->msg + plen, e->msg, olen);
    memcpy(e->msg, prefix, plen);
    e->msg[plen + olen] = '\0';
    return -1;
}

int ds_err_errno(ds_err *e, int errnum, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    size_t len = strlen(e->msg);
    snprintf(e->msg + len, sizeof e->msg - len, ": %s", strerror(errnum));
    return -1;
}
