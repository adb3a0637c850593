/* safetensors: the weights format of the Hugging Face ecosystem (docs/data.md).
 *
 *   8 bytes   N, the header length, uint64 little-endian
 *   N bytes   a JSON object, UTF-8, padded with spaces to a multiple of 8 bytes:
 *             {"__metadata__":{"k":"v",...},
 *              "name":{"dtype":"F32","shape":[2,3],"data_offsets":[begin,end]}, ...}
 *   rest      the byte buffer; offsets are relative to its start
 *
 * The writer lays tensors out as the reference implementation does (largest dtype first,
 * then by name), so files it writes are byte-identical to the reference's for the same
 * tensors and metadata (metadata keys sorted). The reader checks everything and refuses
 * a bad file with a message naming the file and what is wrong: the header length, the
 * JSON (with its byte offset in the header), dtypes, shapes, sizes, offsets out of range,
 * overlapping or leaving gaps. */
#ifndef DS_SAFETENSORS_H
#define DS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"

typedef enum ds_st_dtype {
    DS_ST_BOOL, DS_ST_U8, DS_ST_I8, DS_ST_F8_E5M2, DS_ST_F8_E4M3, DS_ST_I16, DS_ST_U16,
    DS_ST_F16, DS_ST_BF16, DS_ST_I32, DS_ST_U32, DS_ST_F32, DS_ST_F64, DS_ST_I64, DS_ST_U64,
    DS_ST_NDTYPES
} ds_st_dtype;

#define DS_ST_MAX_DIMS 8
#define DS_ST_MAX_HEADER 100000000u /* the reference's limit */

typedef struct ds_st_tensor {
    const char *name;
    ds_st_dtype dtype;
    int ndim;
    int64_t shape[DS_ST_MAX_DIMS];
    const void *data; /* reading: inside the file's mapping (maybe unaligned) */
    uint64_t nbytes;
    uint64_t begin;   /* offset in the byte buffer (reading) */
} ds_st_tensor;

typedef struct ds_st_kv {
    const char *key, *value;
} ds_st_kv;

const char *ds_st_dtype_name(ds_st_dtype t);
size_t ds_st_dtype_size(ds_st_dtype t);
int ds_st_dtype_parse(const char *s, size_t n, ds_st_dtype *out);

/* Writes tensors and metadata (nmeta may be 0) to path through a temporary name renamed
 * into place. Names must be unique, valid UTF-8 and not "__metadata__"; nbytes must be
 * numel * dtype size. */
int ds_st_write(const char *path, const ds_st_tensor *tensors, size_t n, const ds_st_kv *meta,
                size_t nmeta, ds_err *err);

/* The serialized file in memory (malloc'ed, *len bytes): what ds_st_write writes. */
uint8_t *ds_st_serialize(const ds_st_tensor *tensors, size_t n, const ds_st_kv *meta,
                         size_t nmeta, size_t *len, ds_err *err);

typedef struct ds_st_file ds_st_file;

/* Maps path read-only and validates it; NULL with err naming the file on any fault. */
ds_st_file *ds_st_open(const char *path, ds_err *err);
/* The same over bytes in memory (not copied: they must outlive the result); name is
 * used in messages. */
ds_st_file *ds_st_parse(const void *bytes, size_t len, const char *name, ds_err *err);
void ds_st_close(ds_st_file *f);

size_t ds_st_count(const ds_st_file *f);
const ds_st_tensor *ds_st_at(const ds_st_file *f, size_t i); /* sorted by name */
const ds_st_tensor *ds_st_find(const ds_st_file *f, const char *name);
size_t ds_st_meta_count(const ds_st_file *f);
const ds_st_kv *ds_st_meta_at(const ds_st_file *f, size_t i); /* sorted by key */
const char *ds_st_meta_get(const ds_st_file *f, const char *key);

#endif
