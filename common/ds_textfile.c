#include "ds_textfile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *ds_textfile_read(const char *path, const char *what, size_t max_bytes, ds_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ds_err_errno(err, errno, "%s: cannot open %s", path, what), NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = cap <= max_bytes + 8192 ? realloc(buf, cap) : NULL;
            if (!nb) {
                free(buf);
                fclose(f);
                return ds_err_set(err, "%s: %s is too large (over %zu bytes) or memory ran out",
                                  path, what, max_bytes), NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, 4096, f);
        len += got;
        if (got < 4096) break;
    }
    int read_failed = ferror(f);
    fclose(f);
    if (read_failed) {
        free(buf);
        return ds_err_set(err, "%s: read error (is it a directory?)", path), NULL;
    }
    buf[len] = '\0';
    if (memchr(buf, '\0', len)) {
        int line = 1;
        for (const char *c = buf; *c; c++) line += *c == '\n';
        free(buf);
        return ds_err_set(err, "%s:%d: NUL byte in %s (is it a text file?)", path, line, what),
               NULL;
    }
    return buf;
}
