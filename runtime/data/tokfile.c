#include "tokfile.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void encode_header(uint8_t h[DS_TOKFILE_HEADER], int width, uint64_t count,
                          uint32_t vocab) {
    memset(h, 0, DS_TOKFILE_HEADER);
    memcpy(h, DS_TOKFILE_MAGIC, 8);
    put_le(h + 8, DS_TOKFILE_VERSION, 4);
    put_le(h + 12, (uint64_t)width, 4);
    put_le(h + 16, count, 8);
    put_le(h + 24, vocab, 4);
}

int ds_tokwriter_open(ds_tokwriter *w, const char *path, int width, uint32_t vocab,
                      ds_err *err) {
    memset(w, 0, sizeof *w);
    if (width != 2 && width != 4)
        return ds_err_set(err, "%s: token width %d (2 or 4 allowed)", path, width);
    if (width == 2 && vocab > 65536)
        return ds_err_set(err, "%s: vocab %u does not fit 2-byte tokens", path, vocab);
    if (strlen(path) >= sizeof w->path) return ds_err_set(err, "%s: path too long", path);
    strcpy(w->path, path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp-%ld", path, (long)getpid());
    w->width = width;
    w->vocab = vocab;
    FILE *fp = fopen(w->tmp, "wb");
    if (!fp) return ds_err_errno(err, errno, "%s: cannot create", w->tmp);
    w->fp = fp;
    uint8_t h[DS_TOKFILE_HEADER];
    encode_header(h, width, 0, vocab); /* the count is patched in by close */
    if (fwrite(h, 1, sizeof h, fp) != sizeof h)
        return ds_err_errno(err, errno, "%s: write", w->tmp);
    return 0;
}

int ds_tokwriter_put(ds_tokwriter *w, const uint32_t *tokens, size_t n, ds_err *err) {
    uint8_t buf[8192];
    uint64_t limit = w->width == 2 ? 65536 : UINT64_C(1) << 32;
    if (w->vocab && w->vocab < limit) limit = w->vocab;
    size_t per = sizeof buf / (size_t)w->width;
    for (size_t done = 0; done < n;) {
        size_t k = n - done < per ? n - done : per;
        for (size_t i = 0; i < k; i++) {
            uint32_t t = tokens[done + i];
            if (t >= limit)
                return ds_err_set(err, "%s: token %u at index %llu is out of range (< %llu)",
                                  w->path, t, (unsigned long long)(w->count + done + i),
                                  (unsigned long long)limit);
            put_le(buf + i * (size_t)w->width, t, w->width);
        }
        if (fwrite(buf, (size_t)w->width, k, w->fp) != k)
            return ds_err_errno(err, errno, "%s: write", w->tmp);
        done += k;
    }
    w->count += n;
    return 0;
}

int ds_tokwriter_close(ds_tokwriter *w, ds_err *err) {
    FILE *fp = w->fp;
    uint8_t h[DS_TOKFILE_HEADER];
    encode_header(h, w->width, w->count, w->vocab);
    if (fseek(fp, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, fp) != sizeof h ||
        fflush(fp) != 0 || fsync(fileno(fp)) != 0)
        return ds_err_errno(err, errno, "%s: write", w->tmp);
    w->fp = NULL;
    if (fclose(fp) != 0) return ds_err_errno(err, errno, "%s: close", w->tmp);
    if (rename(w->tmp, w->path) != 0)
        return ds_err_errno(err, errno, "%s: cannot rename to %s", w->tmp, w->path);
    return 0;
}

void ds_tokwriter_abort(ds_tokwriter *w) {
    if (w->fp) fclose(w->fp);
    w->fp = NULL;
    if (w->tmp[0]) unlink(w->tmp);
}

int ds_tokfile_write(const char *path, const uint32_t *tokens, uint64_t count, int width,
                     uint32_t vocab, ds_err *err) {
    ds_tokwriter w;
    if (ds_tokwriter_open(&w, path, width, vocab, err) != 0 ||
        ds_tokwriter_put(&w, tokens, (size_t)count, err) != 0 ||
        ds_tokwriter_close(&w, err) != 0) {
        ds_tokwriter_abort(&w);
        return -1;
    }
    return 0;
}

static int check_header(const uint8_t *h, size_t size, ds_tokfile *tf, ds_err *err) {
    const char *path = tf->path;
    if (size < 8 || memcmp(h, DS_TOKFILE_MAGIC, 8) != 0)
        return ds_err_set(err, "%s: not a token file (bad magic; expected \"%s\")", path,
                          DS_TOKFILE_MAGIC);
    if (size < DS_TOKFILE_HEADER)
        return ds_err_set(err, "%s: truncated header (%zu of %u bytes)", path, size,
                          DS_TOKFILE_HEADER);
    uint64_t version = get_le(h + 8, 4), width = get_le(h + 12, 4);
    uint64_t count = get_le(h + 16, 8), vocab = get_le(h + 24, 4);
    if (version != DS_TOKFILE_VERSION)
        return ds_err_set(err, "%s: unsupported token file version %llu (this dsrun reads %u)",
                          path, (unsigned long long)version, DS_TOKFILE_VERSION);
    if (width != 2 && width != 4)
        return ds_err_set(err, "%s: bad token width %llu (2 or 4 allowed)", path,
                          (unsigned long long)width);
    if (get_le(h + 28, 4) != 0)
        return ds_err_set(err, "%s: reserved header field is not zero", path);
    if (width == 2 && vocab > 65536)
        return ds_err_set(err, "%s: vocab %llu does not fit 2-byte tokens", path,
                          (unsigned long long)vocab);
    uint64_t body = size - DS_TOKFILE_HEADER;
    if (count > body / width)
        return ds_err_set(err, "%s: truncated: header says %llu tokens (%llu bytes), file has "
                          "%llu bytes of tokens", path, (unsigned long long)count,
                          (unsigned long long)(count > UINT64_MAX / width ? UINT64_MAX
                                                                           : count * width),
                          (unsigned long long)body);
    if (body != count * width)
        return ds_err_set(err, "%s: %llu bytes after the last of %llu tokens", path,
                          (unsigned long long)(body - count * width), (unsigned long long)count);
    tf->width = (int)width;
    tf->vocab = (uint32_t)vocab;
    tf->count = count;
    return 0;
}

int ds_tokfile_open(ds_tokfile *tf, const char *path, ds_err *err) {
    memset(tf, 0, sizeof *tf);
    snprintf(tf->path, sizeof tf->path, "%s", path);
    if (ds_mapfile_open(&tf->file, path, "token file", err) != 0) return -1;
    if (tf->file.len == 0) {
        ds_tokfile_close(tf);
        return ds_err_set(err, "%s: empty file (not a token file)", path);
    }
    if (check_header(tf->file.data, tf->file.len, tf, err) != 0) {
        ds_tokfile_close(tf);
        return -1;
    }
    tf->tokens = (const uint8_t *)tf->file.data + DS_TOKFILE_HEADER;
    return 0;
}

void ds_tokfile_close(ds_tokfile *tf) {
    ds_mapfile_close(&tf->file);
    tf->tokens = NULL;
}

int ds_tokfile_check_range(const ds_tokfile *tf, uint32_t vocab, ds_err *err) {
    for (uint64_t i = 0; i < tf->count; i++) {
        uint32_t t = ds_tokfile_get(tf, i);
        if (t >= vocab)
            return ds_err_set(err, "%s: token %u at index %llu is out of range for vocab %u",
                              tf->path, t, (unsigned long long)i, vocab);
    }
    return 0;
}
