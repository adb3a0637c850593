/* Helpers shared by the data tests: a scratch directory and raw file writes. */
#ifndef DATA_TEST_UTIL_H
#define DATA_TEST_UTIL_H

#include <stddef.h>

/* A fresh directory under TMPDIR (or /tmp); removed with everything in it by rmtree. */
const char *scratch_dir(void);
void scratch_cleanup(void);
/* dir/name into a static ring of buffers (valid for the next few calls). */
const char *scratch_path(const char *name);
void write_bytes(const char *path, const void *data, size_t n);
/* Reads the whole file into a malloc'ed buffer; *n gets its size. */
unsigned char *read_bytes(const char *path, size_t *n);

#endif
