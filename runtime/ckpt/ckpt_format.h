/* The shard file format (internal to runtime/ckpt; docs/checkpoints.md describes it for
 * people). All integers little-endian, written byte by byte so the layout never depends
 * on struct padding or the host.
 *
 *   file header   64 bytes   magic "DSCKSHRD", version, rank, world, sections, step,
 *                            file bytes, digest, chunk bytes, header crc
 *   per section   80 bytes   "SECT", name length, dtype, chunks, total numel, begin,
 *                            end, payload offset, payload bytes, next section offset,
 *                            header crc (over these bytes + name + chunk crcs)
 *                 name       name length bytes
 *                 chunk crcs one CRC-32C per chunk of payload (chunk bytes each, last
 *                            shorter), so any range is verified by reading only the
 *                            chunks it touches
 *                 payload    64-byte aligned
 *
 * The digest in the file header is the CRC-32C of every section's header block (80
 * bytes + name + chunk crcs) in order: it commits to the whole content, and meta.json
 * records it so a shard from another save can never pass for this one. */
#ifndef DS_CKPT_FORMAT_H
#define DS_CKPT_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "ds_err.h"
#include "ds_dtype.h"

#define CKPT_MAGIC "DSCKSHRD"
#define CKPT_VERSION 1
#define CKPT_FILE_HEADER 64
#define CKPT_SECT_HEADER 80
#define CKPT_ALIGN 64
#define CKPT_CHUNK (1u << 20)
#define CKPT_NAME_MAX 255
#define CKPT_MAX_SECTIONS 65536
#define CKPT_MAX_WORLD 1048576

/* dtype as stored: fixed codes, independent of the ds_dtype enum's order. */
int ckpt_dtype_code(ds_dtype t);
size_t ckpt_dtype_size(ds_dtype t);
const char *ckpt_dtype_name(ds_dtype t);
int ckpt_dtype_from_code(uint32_t code, ds_dtype *out);
int ckpt_dtype_from_name(const char *name, ds_dtype *out);

/* Names are [A-Za-z0-9_./-], 1..255 bytes: they land in file names' company (JSON,
 * messages) and must never need escaping or confuse a reader. */
int ckpt_name_ok(const char *name);

typedef struct ckpt_section {
    char name[CKPT_NAME_MAX + 1];
    ds_dtype dtype;
    uint64_t total, begin, end; /* elements */
    uint64_t payload_off, payload_bytes;
    uint32_t nchunks;
    uint32_t *chunk_crc;
} ckpt_section;

typedef struct ckpt_shard {
    char path[4096];
    uint32_t rank, world, nsections, chunk_bytes, digest;
    uint64_t step, file_bytes;
    ckpt_section *sections;
} ckpt_shard;

/* Header encoders: out has CKPT_FILE_HEADER bytes / CKPT_SECT_HEADER + name + 4*chunks. */
void ckpt_encode_file_header(unsigned char *out, const ckpt_shard *s);
/* Returns the section's header block length; fills out (sized by ckpt_sect_block_len). */
size_t ckpt_sect_block_len(const ckpt_section *sec);
void ckpt_encode_sect_block(unsigned char *out, const ckpt_section *sec, uint64_t next_off);

/* Reads a shard file's header and section table (not the payloads) and checks them
 * against the file itself: magic, version, header crcs, sizes, sections inside the file
 * and in order. Messages name the file. */
int ckpt_shard_load(ckpt_shard *s, const char *path, ds_err *err);
void ckpt_shard_free(ckpt_shard *s);

/* Verifies elements [begin, end) of section sec (in its own global coordinates) and
 * copies them to dst. fd is the open shard file. */
int ckpt_section_read(int fd, const ckpt_shard *s, const ckpt_section *sec, uint64_t begin,
                      uint64_t end, void *dst, ds_err *err);

/* File system helpers: whole writes/reads, durable renames. */
int ckpt_write_all(int fd, const void *buf, size_t n);
int ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off); /* 0, or -1 (errno; EIO short) */
int ckpt_fsync_dir(const char *dir, ds_err *err);
/* Writes text to dir/name through dir/name.tmp: write, fsync, rename, fsync dir. */
/* The mode of the directories a save creates: DS_CKPT_MODE (octal, from [checkpoint]
 * mode), else 0700 (checkpoints carry the model: private unless shared on purpose).
 * Files get it without the execute bits. */
int ckpt_dir_mode(void);
static inline int ckpt_file_mode(void) { return ckpt_dir_mode() & 0666; }

int ckpt_write_file_atomic(const char *dir, const char *name, const char *text, size_t n,
                           ds_err *err);
/* Reads a whole small file (at most max bytes) into a NUL-terminated buffer. */
char *ckpt_read_small_file(const char *path, size_t max, size_t *len, ds_err *err);

/* A logical array assembled from the sections of every shard: its pieces sorted by
 * begin, checked to cover [0, numel) exactly once. */
typedef struct ckpt_piece {
    uint32_t shard;   /* index into the shard list */
    uint32_t section; /* index into that shard's sections */
    uint64_t begin, end;
} ckpt_piece;

typedef struct ckpt_array {
    const char *name; /* points into a section */
    ds_dtype dtype;
    uint64_t numel;
    uint32_t npieces;
    ckpt_piece *pieces;
} ckpt_array;

/* Builds the arrays of shards[0..n): same dtype and total in every piece, no overlap,
 * no gap. Arrays come sorted by name. */
int ckpt_build_arrays(const ckpt_shard *shards, uint32_t n, ckpt_array **out,
                      uint32_t *narrays, ds_err *err);
void ckpt_free_arrays(ckpt_array *a, uint32_t n);

#endif
