/* The job's store token: 32 random bytes from the kernel (getrandom), written as 64
 * lowercase hex chars. The controller makes one per job and hands it to agents and
 * workers through the SSH channel (environment or stdin), never on a command line. */
#ifndef DS_STORE_TOKEN_H
#define DS_STORE_TOKEN_H

#include "ds_err.h"

#define DS_STORE_TOKEN_LEN 64

/* Fills out with 64 hex chars and a NUL. */
int ds_store_make_token(char out[DS_STORE_TOKEN_LEN + 1], ds_err *err);

/* 1 when s is exactly 64 hex chars. */
int ds_store_token_valid(const char *s);

/* Compares n bytes in time that depends on n only, not on where they differ. */
int ds_store_token_equal(const void *a, const void *b, size_t n);

#endif
