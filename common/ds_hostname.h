/* This machine's name, the one way every part asks for it: gethostname(2) neither
 * promises a terminating NUL when the name is cut nor a name at all, and each caller
 * needs a different stand-in when there is none ("localhost" for a file name, "?" in a
 * message, "" where the name is compared). */
#ifndef DS_HOSTNAME_H
#define DS_HOSTNAME_H

#include <stddef.h>

/* The host name in buf (size bytes, always NUL-terminated), or fallback (cut to fit) when
 * it cannot be had, is empty or does not fit; returns buf. */
const char *ds_hostname(char *buf, size_t size, const char *fallback);

#endif
