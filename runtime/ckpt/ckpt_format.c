#include "ckpt_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"

/* --- dtypes and names --- */

/* Codes and names are what checkpoint files hold, so the format fixes them here (the
 * names are ds_dtype_name's too) whatever becomes of ds_dtype. */
static const struct { ds_dtype t; uint32_t code, size; const char *name; } DTYPES[] = {
    {DS_F32, 1, 4, "fp32"}, {DS_BF16, 2, 2, "bf16"}, {DS_F16, 3, 2, "fp16"}, {DS_I32, 4, 4, "int32"},
};
#define NDTYPES (sizeof DTYPES / sizeof DTYPES[0])

int ckpt_dtype_code(ds_dtype t) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (DTYPES[i].t == t) return (int)DTYPES[i].code;
    return -1;
}

size_t ckpt_dtype_size(ds_dtype t) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (DTYPES[i].t == t) return DTYPES[i].size;
    return 0;
}

const char *ckpt_dtype_name(ds_dtype t) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (DTYPES[i].t == t) return DTYPES[i].name;
    return "?";
}

int ckpt_dtype_from_code(uint32_t code, ds_dtype *out) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (DTYPES[i].code == code) return *out = DTYPES[i].t, 0;
    return -1;
}

int ckpt_dtype_from_name(const char *name, ds_dtype *out) {
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(DTYPES[i].name, name) == 0) return *out = DTYPES[i].t, 0;
    return -1;
}

int ckpt_name_ok(const char *name) {
    size_t n = strnlen(name, CKPT_NAME_MAX + 1);
    if (n == 0 || n > CKPT_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-'))
            return 0;
    }
    return 1;
}

/* --- little-endian fields --- */

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void ckpt_encode_file_header(unsigned char *out, const ckpt_shard *s) {
    memset(out, 0, CKPT_FILE_HEADER);
    memcpy(out, CKPT_MAGIC, 8);
    put32(out + 8, CKPT_VERSION);
    put32(out + 12, s->rank);
    put32(out + 16, s->world);
    put32(out + 20, s->nsections);
    put64(out + 24, s->step);
    put64(out + 32, s->file_bytes);
    put32(out + 40, s->digest);
    put32(out + 44, s->chunk_bytes);
    put32(out + 60, ds_crc32c(0, out, 60));
}

size_t ckpt_sect_block_len(const ckpt_section *sec) {
    return CKPT_SECT_HEADER + strlen(sec->name) + 4 * (size_t)sec->nchunks;
}

void ckpt_encode_sect_block(unsigned char *out, const ckpt_section *sec, uint64_t next_off) {
    size_t nlen = strlen(sec->name);
    memset(out, 0, CKPT_SECT_HEADER);
    memcpy(out, "SECT", 4);
    put32(out + 4, (uint32_t)nlen);
    put32(out + 8, (uint32_t)ckpt_dtype_code(sec->dtype));
    put32(out + 12, sec->nchunks);
    put64(out + 16, sec->total);
    put64(out + 24, sec->begin);
    put64(out + 32, sec->end);
    put64(out + 40, sec->payload_off);
    put64(out + 48, sec->payload_bytes);
    put64(out + 56, next_off);
    unsigned char *tail = out + CKPT_SECT_HEADER;
    memcpy(tail, sec->name, nlen);
    for (uint32_t c = 0; c < sec->nchunks; c++) put32(tail + nlen + 4 * (size_t)c, sec->chunk_crc[c]);
    uint32_t crc = ds_crc32c(0, out, 76);
    crc = ds_crc32c(crc, tail, nlen + 4 * (size_t)sec->nchunks);
    put32(out + 76, crc);
}

/* --- file system --- */

int ckpt_write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

int ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n) {
        ssize_t k = pread(fd, p, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (k == 0) return errno = EIO, -1; /* the file ends early */
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

int ckpt_fsync_dir(const char *dir, ds_err *err) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ds_err_errno(err, errno, "%s: cannot open directory", dir);
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc != 0) return ds_err_errno(err, e, "%s: fsync", dir);
    return 0;
}

int ckpt_dir_mode(void) {
    const char *v = getenv("DS_CKPT_MODE");
    char *end;
    long m = v && v[0] ? strtol(v, &end, 8) : -1;
    return m >= 0 && m <= 0777 && !*end ? (int)m : 0700;
}

int ckpt_write_file_atomic(const char *dir, const char *name, const char *text, size_t n,
                           ds_err *err) {
    char path[4096], tmp[4096 + 8];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, ckpt_file_mode());
    if (fd < 0) return ds_err_errno(err, errno, "%s: cannot create", tmp);
    fchmod(fd, (mode_t)ckpt_file_mode()); /* the mode asked for, whatever the umask */
    if (ckpt_write_all(fd, text, n) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return ds_err_errno(err, e, "%s: write", tmp);
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return ds_err_errno(err, e, "%s: close", tmp);
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ds_err_errno(err, e, "%s: cannot rename to %s", tmp, path);
    }
    return ckpt_fsync_dir(dir, err);
}

char *ckpt_read_small_file(const char *path, size_t max, size_t *len, ds_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_err_errno(err, errno, "%s", path), NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ds_err_errno(err, e, "%s: stat", path), NULL;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        close(fd);
        return ds_err_set(err, "%s: not a regular file of at most %zu bytes", path, max), NULL;
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return ds_err_set(err, "%s: out of memory", path), NULL;
    }
    if (n && ckpt_pread_all(fd, buf, n, 0) != 0) {
        int e = errno;
        close(fd);
        free(buf);
        return ds_err_errno(err, e, "%s: read", path), NULL;
    }
    close(fd);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* --- loading a shard's table --- */

static int load_section(ckpt_shard *s, int fd, uint64_t *off, ckpt_section *sec,
                        uint32_t *digest, ds_err *err) {
    const char *f = s->path;
    uint64_t at = *off;
    unsigned char h[CKPT_SECT_HEADER];
    if (at > s->file_bytes || s->file_bytes - at < CKPT_SECT_HEADER)
        return ds_err_set(err, "%s: truncated: section header at byte %llu runs past the end",
                          f, (unsigned long long)at);
    if (ckpt_pread_all(fd, h, sizeof h, at) != 0)
        return ds_err_errno(err, errno, "%s: read at byte %llu", f, (unsigned long long)at);
    if (memcmp(h, "SECT", 4) != 0)
        return ds_err_set(err, "%s: corrupted: no section header at byte %llu", f,
                          (unsigned long long)at);
    uint32_t nlen = get32(h + 4), code = get32(h + 8);
    sec->nchunks = get32(h + 12);
    sec->total = get64(h + 16);
    sec->begin = get64(h + 24);
    sec->end = get64(h + 32);
    sec->payload_off = get64(h + 40);
    sec->payload_bytes = get64(h + 48);
    uint64_t next = get64(h + 56);
    if (nlen == 0 || nlen > CKPT_NAME_MAX || ckpt_dtype_from_code(code, &sec->dtype) != 0)
        return ds_err_set(err, "%s: corrupted: bad section header at byte %llu", f,
                          (unsigned long long)at);
    /* The table's size is checked against the file before it is allocated. */
    uint64_t block = CKPT_SECT_HEADER + (uint64_t)nlen + 4 * (uint64_t)sec->nchunks;
    if (s->file_bytes - at < block)
        return ds_err_set(err, "%s: truncated: section table at byte %llu runs past the end",
                          f, (unsigned long long)at);
    unsigned char *tail = malloc(block - CKPT_SECT_HEADER);
    if (!tail) return ds_err_set(err, "%s: out of memory", f);
    if (ckpt_pread_all(fd, tail, block - CKPT_SECT_HEADER, at + CKPT_SECT_HEADER) != 0) {
        free(tail);
        return ds_err_errno(err, errno, "%s: read at byte %llu", f, (unsigned long long)at);
    }
    uint32_t crc = ds_crc32c(ds_crc32c(0, h, 76), tail, block - CKPT_SECT_HEADER);
    if (crc != get32(h + 76)) {
        free(tail);
        return ds_err_set(err, "%s: corrupted: section header at byte %llu fails its checksum",
                          f, (unsigned long long)at);
    }
    *digest = ds_crc32c(ds_crc32c(*digest, h, sizeof h), tail, block - CKPT_SECT_HEADER);
    memcpy(sec->name, tail, nlen);
    sec->name[nlen] = '\0';
    sec->chunk_crc = malloc(sec->nchunks ? 4 * (size_t)sec->nchunks : 1);
    if (!sec->chunk_crc) {
        free(tail);
        return ds_err_set(err, "%s: out of memory", f);
    }
    for (uint32_t c = 0; c < sec->nchunks; c++) sec->chunk_crc[c] = get32(tail + nlen + 4 * (size_t)c);
    free(tail);

    /* A valid checksum only proves the header is what some writer wrote; its numbers
     * must also agree with each other and with the file. */
    uint64_t esz = ckpt_dtype_size(sec->dtype), count = sec->end - sec->begin;
    int bad = strlen(sec->name) != nlen || !ckpt_name_ok(sec->name) || sec->begin > sec->end || sec->end > sec->total ||
              count > UINT64_MAX / esz || sec->payload_bytes != count * esz ||
              sec->nchunks != (sec->payload_bytes + s->chunk_bytes - 1) / s->chunk_bytes ||
              sec->payload_off < at + block || sec->payload_off % CKPT_ALIGN != 0 ||
              sec->payload_off > s->file_bytes ||
              s->file_bytes - sec->payload_off < sec->payload_bytes ||
              next != sec->payload_off + sec->payload_bytes;
    if (bad)
        return ds_err_set(err, "%s: corrupted: section '%s' at byte %llu is inconsistent", f,
                          sec->name, (unsigned long long)at);
    /* The alignment padding is covered by no checksum, so it must be zero: then every
     * byte of a shard is checked by something. */
    unsigned char pad[CKPT_ALIGN];
    uint64_t npad = sec->payload_off - (at + block);
    if (npad >= CKPT_ALIGN)
        return ds_err_set(err, "%s: corrupted: section '%s' at byte %llu is inconsistent", f,
                          sec->name, (unsigned long long)at);
    if (ckpt_pread_all(fd, pad, npad, at + block) != 0)
        return ds_err_errno(err, errno, "%s: read at byte %llu", f, (unsigned long long)at);
    for (uint64_t i = 0; i < npad; i++)
        if (pad[i] != 0)
            return ds_err_set(err, "%s: corrupted: padding before section '%s' payload is not "
                                   "zero", f, sec->name);
    *off = next;
    return 0;
}

int ckpt_shard_load(ckpt_shard *s, const char *path, ds_err *err) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_err_errno(err, errno, "%s: missing shard", path);
    struct stat st;
    unsigned char h[CKPT_FILE_HEADER];
    int rc = -1;
    if (fstat(fd, &st) != 0) {
        ds_err_errno(err, errno, "%s: stat", path);
        goto out;
    }
    if ((uint64_t)st.st_size < CKPT_FILE_HEADER) {
        ds_err_set(err, "%s: truncated: %lld bytes, shorter than a header", path,
                   (long long)st.st_size);
        goto out;
    }
    if (ckpt_pread_all(fd, h, sizeof h, 0) != 0) {
        ds_err_errno(err, errno, "%s: read", path);
        goto out;
    }
    if (memcmp(h, CKPT_MAGIC, 8) != 0) {
        ds_err_set(err, "%s: not a checkpoint shard (bad magic)", path);
        goto out;
    }
    if (get32(h + 60) != ds_crc32c(0, h, 60)) {
        ds_err_set(err, "%s: corrupted: file header fails its checksum", path);
        goto out;
    }
    if (get32(h + 8) != CKPT_VERSION) {
        ds_err_set(err, "%s: format version %u, this build reads %d", path, get32(h + 8),
                   CKPT_VERSION);
        goto out;
    }
    s->rank = get32(h + 12);
    s->world = get32(h + 16);
    s->nsections = get32(h + 20);
    s->step = get64(h + 24);
    s->file_bytes = get64(h + 32);
    s->digest = get32(h + 40);
    s->chunk_bytes = get32(h + 44);
    if (s->world == 0 || s->world > CKPT_MAX_WORLD || s->rank >= s->world ||
        s->nsections > CKPT_MAX_SECTIONS || s->chunk_bytes < 4096 ||
        s->chunk_bytes > (1u << 30) || s->chunk_bytes % CKPT_ALIGN != 0) {
        ds_err_set(err, "%s: corrupted: inconsistent file header", path);
        goto out;
    }
    if ((uint64_t)st.st_size != s->file_bytes) {
        ds_err_set(err, "%s: %s: %lld bytes, its header says %llu", path,
                   (uint64_t)st.st_size < s->file_bytes ? "truncated" : "trailing bytes",
                   (long long)st.st_size, (unsigned long long)s->file_bytes);
        goto out;
    }
    s->sections = calloc(s->nsections ? s->nsections : 1, sizeof *s->sections);
    if (!s->sections) {
        ds_err_set(err, "%s: out of memory", path);
        goto out;
    }
    uint64_t off = CKPT_FILE_HEADER;
    uint32_t digest = 0;
    for (uint32_t i = 0; i < s->nsections; i++) {
        if (load_section(s, fd, &off, &s->sections[i], &digest, err) != 0) goto out;
        for (uint32_t k = 0; k < i; k++)
            if (strcmp(s->sections[k].name, s->sections[i].name) == 0) {
                ds_err_set(err, "%s: corrupted: section '%s' appears twice", path,
                           s->sections[i].name);
                goto out;
            }
    }
    if (off != s->file_bytes) {
        ds_err_set(err, "%s: corrupted: %llu bytes after the last section", path,
                   (unsigned long long)(s->file_bytes - off));
        goto out;
    }
    if (digest != s->digest) {
        ds_err_set(err, "%s: corrupted: section table does not match the file's digest", path);
        goto out;
    }
    rc = 0;
out:
    close(fd);
    if (rc != 0) ckpt_shard_free(s);
    return rc;
}

void ckpt_shard_free(ckpt_shard *s) {
    if (s->sections)
        for (uint32_t i = 0; i < s->nsections; i++) free(s->sections[i].chunk_crc);
    free(s->sections);
    s->sections = NULL;
}

int ckpt_section_read(int fd, const ckpt_shard *s, const ckpt_section *sec, uint64_t begin,
                      uint64_t end, void *dst, ds_err *err) {
    if (begin < sec->begin || end > sec->end || begin > end)
        return ds_err_set(err, "%s: range [%llu,%llu) outside section '%s'", s->path,
                          (unsigned long long)begin, (unsigned long long)end, sec->name);
    if (begin == end) return 0;
    uint64_t esz = ckpt_dtype_size(sec->dtype), cb = s->chunk_bytes;
    uint64_t lo = (begin - sec->begin) * esz, hi = (end - sec->begin) * esz; /* in payload */
    unsigned char *scratch = NULL, *out = dst;
    for (uint64_t c = lo / cb; c * cb < hi; c++) {
        uint64_t c0 = c * cb, c1 = c0 + cb < sec->payload_bytes ? c0 + cb : sec->payload_bytes;
        uint64_t want0 = lo > c0 ? lo : c0, want1 = hi < c1 ? hi : c1;
        /* A chunk wholly wanted is read straight into dst; a partial one via scratch. */
        unsigned char *buf = out + (c0 - lo);
        if (want0 != c0 || want1 != c1) {
            if (!scratch && !(scratch = malloc(cb)))
                return ds_err_set(err, "%s: out of memory", s->path);
            buf = scratch;
        }
        if (ckpt_pread_all(fd, buf, c1 - c0, sec->payload_off + c0) != 0) {
            int e = errno;
            free(scratch);
            return ds_err_errno(err, e, "%s: read section '%s'", s->path, sec->name);
        }
        if (ds_crc32c(0, buf, c1 - c0) != sec->chunk_crc[c]) {
            free(scratch);
            return ds_err_set(err,
                              "%s: corrupted: section '%s' bytes %llu..%llu of the file fail "
                              "their checksum",
                              s->path, sec->name, (unsigned long long)(sec->payload_off + c0),
                              (unsigned long long)(sec->payload_off + c1));
        }
        if (buf == scratch) memcpy(out + (want0 - lo), scratch + (want0 - c0), want1 - want0);
    }
    free(scratch);
    return 0;
}

/* --- arrays across shards --- */

typedef struct ref {
    const ckpt_section *sec;
    uint32_t shard, section;
} ref;

static int ref_cmp(const void *a, const void *b) {
    const ref *x = a, *y = b;
    int c = strcmp(x->sec->name, y->sec->name);
    if (c) return c;
    if (x->sec->begin != y->sec->begin) return x->sec->begin < y->sec->begin ? -1 : 1;
    if (x->sec->end != y->sec->end) return x->sec->end < y->sec->end ? -1 : 1;
    return x->shard < y->shard ? -1 : x->shard > y->shard;
}

static int check_array(const ckpt_shard *shards, const ref *r, size_t n, ckpt_array *a,
                       ds_err *err) {
    a->name = r[0].sec->name;
    a->dtype = r[0].sec->dtype;
    a->numel = r[0].sec->total;
    a->pieces = calloc(n, sizeof *a->pieces);
    if (!a->pieces) return ds_err_set(err, "out of memory");
    uint64_t covered = 0;
    const char *last_file = NULL;
    for (size_t i = 0; i < n; i++) {
        const ckpt_section *sec = r[i].sec;
        const char *file = shards[r[i].shard].path;
        if (sec->dtype != a->dtype || sec->total != a->numel)
            return ds_err_set(err, "array '%s': %s says %s x %llu, %s says %s x %llu", a->name,
                              shards[r[0].shard].path, ckpt_dtype_name(a->dtype),
                              (unsigned long long)a->numel, file, ckpt_dtype_name(sec->dtype),
                              (unsigned long long)sec->total);
        if (sec->begin == sec->end) continue; /* an empty share (more ranks than elements) */
        if (sec->begin < covered)
            return ds_err_set(err, "array '%s': elements [%llu,%llu) saved twice (%s and %s)",
                              a->name, (unsigned long long)sec->begin,
                              (unsigned long long)covered, last_file, file);
        if (sec->begin > covered)
            return ds_err_set(err, "array '%s': elements [%llu,%llu) saved by no shard",
                              a->name, (unsigned long long)covered,
                              (unsigned long long)sec->begin);
        a->pieces[a->npieces++] =
            (ckpt_piece){r[i].shard, r[i].section, sec->begin, sec->end};
        covered = sec->end;
        last_file = file;
    }
    if (covered != a->numel)
        return ds_err_set(err, "array '%s': elements [%llu,%llu) saved by no shard", a->name,
                          (unsigned long long)covered, (unsigned long long)a->numel);
    return 0;
}

int ckpt_build_arrays(const ckpt_shard *shards, uint32_t n, ckpt_array **out,
                      uint32_t *narrays, ds_err *err) {
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += shards[i].nsections;
    ref *refs = malloc((total ? total : 1) * sizeof *refs);
    ckpt_array *arr = calloc(total ? total : 1, sizeof *arr);
    if (!refs || !arr) {
        free(refs);
        free(arr);
        return ds_err_set(err, "out of memory");
    }
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < shards[i].nsections; j++)
            refs[k++] = (ref){&shards[i].sections[j], i, j};
    qsort(refs, total, sizeof *refs, ref_cmp);
    uint32_t na = 0;
    for (size_t i = 0; i < total;) {
        size_t j = i + 1;
        while (j < total && strcmp(refs[j].sec->name, refs[i].sec->name) == 0) j++;
        if (check_array(shards, refs + i, j - i, &arr[na++], err) != 0) {
            free(refs);
            ckpt_free_arrays(arr, na);
            return -1;
        }
        i = j;
    }
    free(refs);
    *out = arr;
    *narrays = na;
    return 0;
}

void ckpt_free_arrays(ckpt_array *a, uint32_t n) {
    if (!a) return;
    for (uint32_t i = 0; i < n; i++) free(a[i].pieces);
    free(a);
}
