/* Token files: what `dsrun tokenize` writes and the loader reads (docs/data.md).
 *
 *   offset  size  field
 *   0       8     magic "DSTOKENS"
 *   8       4     version, uint32 LE (1)
 *   12      4     token width in bytes, uint32 LE (2 or 4)
 *   16      8     token count, uint64 LE
 *   24      4     vocabulary size, uint32 LE (0: unknown)
 *   28      4     reserved, zero
 *   32      ...   count tokens, uint16 or uint32 LE
 *
 * The file is exactly 32 + count * width bytes. Files are mapped read-only, so opening a
 * large corpus costs no memory beyond the page cache. */
#ifndef DS_TOKFILE_H
#define DS_TOKFILE_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "ds_mapfile.h"

#define DS_TOKFILE_MAGIC "DSTOKENS"
#define DS_TOKFILE_VERSION 1u
#define DS_TOKFILE_HEADER 32u

typedef struct ds_tokfile {
    char path[512];
    int width;          /* bytes per token: 2 or 4 */
    uint32_t vocab;     /* from the header; 0 when the writer did not know it */
    uint64_t count;     /* tokens */
    const uint8_t *tokens; /* count * width bytes inside the mapping */
    ds_mapfile file;
} ds_tokfile;

/* A streaming writer: tokens go to "<path>.tmp-<pid>", which close() completes (count in
 * the header, fsync) and renames to path, so a reader never sees half a file. A token
 * that does not fit the width, or is >= vocab when vocab is set, is an error naming its
 * index; after any error, call ds_tokwriter_abort. */
typedef struct ds_tokwriter {
    char path[512], tmp[560];
    void *fp; /* FILE * */
    int width;
    uint32_t vocab;
    uint64_t count;
} ds_tokwriter;

int ds_tokwriter_open(ds_tokwriter *w, const char *path, int width, uint32_t vocab,
                      ds_err *err);
int ds_tokwriter_put(ds_tokwriter *w, const uint32_t *tokens, size_t n, ds_err *err);
int ds_tokwriter_close(ds_tokwriter *w, ds_err *err);
void ds_tokwriter_abort(ds_tokwriter *w); /* removes the temporary file */

/* All of tokens at once, through a ds_tokwriter. */
int ds_tokfile_write(const char *path, const uint32_t *tokens, uint64_t count, int width,
                     uint32_t vocab, ds_err *err);

/* Maps path and checks its header and size; the tokens are not scanned (see
 * ds_tokfile_check_range). Errors name the file. */
int ds_tokfile_open(ds_tokfile *tf, const char *path, ds_err *err);
void ds_tokfile_close(ds_tokfile *tf);

/* Checks every token is < vocab; the error names the file, the index and the value. */
int ds_tokfile_check_range(const ds_tokfile *tf, uint32_t vocab, ds_err *err);

static inline uint32_t ds_tokfile_get(const ds_tokfile *tf, uint64_t i) {
    const uint8_t *p = tf->tokens + i * (uint64_t)tf->width;
    if (tf->width == 2) return (uint32_t)p[0] | (uint32_t)p[1] << 8;
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

#endif
