/* libFuzzer: the checkpoint shard reader (runtime/ckpt/ckpt_format.c) on arbitrary bytes.
 * Every header and table in a shard carries a CRC-32C, so raw mutations would be refused
 * at the first checksum and never reach the consistency checks behind it. The harness
 * therefore plays the writer's last step first: it puts the magic and version in place,
 * sets the file size, recomputes every chunk, section and file checksum and the digest
 * over what the input lays out, and only then hands the file to the reader. Whatever
 * loads must read back section by section and assemble into arrays, or be refused with
 * a message; never crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include "ckpt_format.h"
#include "crc32c.h"

#define MAX_SECTIONS 64 /* the harness stops fixing checksums after this many */

static uint32_t get32(const uint8_t *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Chunk CRCs of the payload the section header points at, where it lies in the file. */
static void fix_chunks(uint8_t *f, size_t n, uint8_t *h, uint8_t *crcs, uint32_t nchunks,
                       uint32_t chunk_bytes) {
    uint64_t off = get64(h + 40), bytes = get64(h + 48);
    if (chunk_bytes == 0 || off > n || n - off < bytes) return;
    for (uint32_t c = 0; c < nchunks && (uint64_t)c * chunk_bytes < bytes; c++) {
        uint64_t lo = (uint64_t)c * chunk_bytes, len = bytes - lo < chunk_bytes ? bytes - lo : chunk_bytes;
        put32(crcs + 4 * (size_t)c, ds_crc32c(0, f + off + lo, (size_t)len));
    }
}

/* Walks the section chain as the reader will, fixing each block's checksums; returns the
 * digest over the blocks it fixed. */
static uint32_t fix_sections(uint8_t *f, size_t n, uint32_t nsections, uint32_t chunk_bytes) {
    uint64_t at = CKPT_FILE_HEADER;
    uint32_t digest = 0;
    for (uint32_t i = 0; i < nsections && i < MAX_SECTIONS; i++) {
        if (at > n || n - at < CKPT_SECT_HEADER) break;
        uint8_t *h = f + at;
        memcpy(h, "SECT", 4);
        uint64_t nlen = get32(h + 4), nchunks = get32(h + 12);
        uint64_t block = CKPT_SECT_HEADER + nlen + 4 * nchunks;
        if (n - at < block) break;
        fix_chunks(f, n, h, h + CKPT_SECT_HEADER + nlen, (uint32_t)nchunks, chunk_bytes);
        put32(h + 76, ds_crc32c(ds_crc32c(0, h, 76), h + CKPT_SECT_HEADER, (size_t)(block - CKPT_SECT_HEADER)));
        digest = ds_crc32c(digest, h, (size_t)block);
        uint64_t next = get64(h + 56);
        if (next <= at) break;
        at = next;
    }
    return digest;
}

static int file_of(const uint8_t *data, size_t n, char *path, size_t cap) {
    int fd = memfd_create("shard", MFD_CLOEXEC);
    if (fd < 0) abort();
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, data + off, n - off);
        if (w <= 0) abort();
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static void read_back(const ckpt_shard *s, const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) abort();
    for (uint32_t i = 0; i < s->nsections; i++) {
        const ckpt_section *sec = &s->sections[i];
        void *dst = malloc(sec->payload_bytes ? sec->payload_bytes : 1);
        if (!dst) abort();
        ds_err err = {{0}};
        if (ckpt_section_read(fd, s, sec, sec->begin, sec->end, dst, &err) != 0 && !err.msg[0])
            abort(); /* a refusal must say why */
        free(dst);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < CKPT_FILE_HEADER || size > (1u << 20)) return 0;
    uint8_t *f = malloc(size);
    if (!f) abort();
    memcpy(f, data, size);
    memcpy(f, CKPT_MAGIC, 8);
    put32(f + 8, CKPT_VERSION);
    put64(f + 32, size);
    put32(f + 40, fix_sections(f, size, get32(f + 20), get32(f + 44)));
    put32(f + 60, ds_crc32c(0, f, 60));

    char path[64];
    int fd = file_of(f, size, path, sizeof path);
    ckpt_shard s;
    ds_err err = {{0}};
    if (ckpt_shard_load(&s, path, &err) == 0) {
        read_back(&s, path);
        ckpt_array *arrays;
        uint32_t n;
        if (ckpt_build_arrays(&s, 1, &arrays, &n, &err) == 0) ckpt_free_arrays(arrays, n);
        else if (!err.msg[0]) abort();
    } else if (!err.msg[0]) {
        abort();
    }
    ckpt_shard_free(&s);
    close(fd);
    free(f);
    return 0;
}
