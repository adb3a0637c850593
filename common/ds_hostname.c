#include "ds_hostname.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

const char *ds_hostname(char *buf, size_t size, const char *fallback) {
    if (size == 0) return buf;
    char h[256];
    /* a name that fills h (or buf) may have been cut: taken as no name */
    if (gethostname(h, sizeof h) != 0 || !memchr(h, '\0', sizeof h - 1) || !h[0] ||
        strlen(h) >= size)
        snprintf(buf, size, "%s", fallback);
    else
        memcpy(buf, h, strlen(h) + 1);
    return buf;
}
