/* Loading: meta.json is checked against every shard's header and section table when the
 * checkpoint is opened (so a missing, truncated or foreign shard is refused before any
 * state is touched); payload chunks are checked as they are read. Any logical range is
 * gathered from whichever saved ranges overlap it, which is all resharding needs. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_format.h"
#include "crc32c.h"
#include "ds_json_read.h"

#define META_MAX (256u << 20)

struct ds_ckpt {
    char dir[4096];
    char meta_path[4096 + 16];
    int64_t step;
    uint32_t world;
    char *engine;
    ckpt_shard *shards;
    int *fds; /* opened on first read */
    ckpt_array *arrays;
    uint32_t narrays;
};

int ds_ckpt_latest(const char *dir, char *name, size_t cap, ds_err *err) {
    char path[4096 + 16];
    snprintf(path, sizeof path, "%s/latest", dir);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 0;
    size_t n;
    char *text = ckpt_read_small_file(path, 256, &n, err);
    if (!text) return -1;
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ' || text[n - 1] == '\r')) n--;
    text[n] = '\0';
    /* Only "step-<digits>": the name is joined to a path, so nothing else may pass. */
    int ok = n > 5 && n < cap && strncmp(text, "step-", 5) == 0;
    for (size_t i = 5; ok && i < n; i++) ok = text[i] >= '0' && text[i] <= '9';
    if (!ok) {
        ds_err_set(err, "%s: malformed (expected step-<N>)", path);
        free(text);
        return -1;
    }
    memcpy(name, text, n + 1);
    free(text);
    return 1;
}

static int file_exists(const char *dir, const char *name) {
    char path[4096 + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static int resolve_dir(ds_ckpt *ck, const char *path, ds_err *err) {
    if (file_exists(path, "meta.json")) {
        if (snprintf(ck->dir, sizeof ck->dir, "%s", path) >= (int)sizeof ck->dir)
            return ds_err_set(err, "%s: path too long", path);
        return 0;
    }
    char name[64];
    int has = ds_ckpt_latest(path, name, sizeof name, err);
    if (has < 0) return -1;
    if (has == 0) {
        if (access(path, F_OK) != 0) return ds_err_errno(err, errno, "%s", path);
        return ds_err_set(err, "%s: no checkpoint here (neither meta.json nor latest)", path);
    }
    if (snprintf(ck->dir, sizeof ck->dir, "%s/%s", path, name) >= (int)sizeof ck->dir)
        return ds_err_set(err, "%s: path too long", path);
    if (!file_exists(ck->dir, "meta.json"))
        return ds_err_set(err, "%s/latest names %s, which has no meta.json", path, name);
    return 0;
}

/* --- meta.json fields: every one present with the right type, or a message saying so --- */

static int get_int(const ds_ckpt *ck, const ds_jv *o, const char *key, const char *where,
                   long long lo, long long hi, long long *out, ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    if (!v || v->type != DS_JV_NUM || !v->is_int || v->inum < lo || v->inum > hi)
        return ds_err_set(err, "%s: %s\"%s\" missing or not an integer in [%lld, %lld]",
                          ck->meta_path, where, key, lo, hi);
    *out = v->inum;
    return 0;
}

static const char *get_str(const ds_ckpt *ck, const ds_jv *o, const char *key,
                           const char *where, ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    if (!ds_jv_is_cstr(v))
        return ds_err_set(err, "%s: %s\"%s\" missing or not a string", ck->meta_path, where, key),
               NULL;
    return v->str;
}

static const ds_jv *get_typed(const ds_ckpt *ck, const ds_jv *o, const char *key,
                              ds_jv_type t, ds_err *err) {
    const ds_jv *v = ds_jv_get(o, key);
    if (!v || v->type != t)
        return ds_err_set(err, "%s: \"%s\" missing or not %s", ck->meta_path, key,
                          ds_jv_type_name(t)), NULL;
    return v;
}

static int check_engine(ds_ckpt *ck, const ds_jv *meta, ds_err *err) {
    const ds_jv *eng = get_typed(ck, meta, "engine", DS_JV_OBJ, err);
    const char *crc = eng ? get_str(ck, meta, "engine_crc32c", "", err) : NULL;
    if (!crc) return -1;
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_jv_emit(&j, eng);
    if (j.bad) {
        ds_buf_free(&j.text);
        return ds_err_set(err, "%s: \"engine\" cannot be re-encoded", ck->meta_path);
    }
    char want[16];
    snprintf(want, sizeof want, "%08x", ds_crc32c(0, ds_buf_str(&j.text), j.text.len));
    if (strcmp(want, crc) != 0) {
        ds_buf_free(&j.text);
        return ds_err_set(err, "%s: corrupted: \"engine\" fails its checksum (%s, recorded %s)",
                          ck->meta_path, want, crc);
    }
    ck->engine = (char *)j.text.data; /* freed with ck */
    return 0;
}

/* Each shard must be rank i's file of this very save: header fields and the digest of
 * its section table agree with what meta.json recorded. */
static int load_shards(ds_ckpt *ck, const ds_jv *meta, ds_err *err) {
    const ds_jv *list = get_typed(ck, meta, "shards", DS_JV_ARR, err);
    if (!list) return -1;
    if (list->len != ck->world)
        return ds_err_set(err, "%s: %zu shards listed for world size %u", ck->meta_path,
                          list->len, ck->world);
    ck->shards = calloc(ck->world, sizeof *ck->shards);
    ck->fds = malloc(ck->world * sizeof *ck->fds);
    if (!ck->shards || !ck->fds) return ds_err_set(err, "out of memory");
    for (uint32_t r = 0; r < ck->world; r++) ck->fds[r] = -1;
    for (uint32_t r = 0; r < ck->world; r++) {
        const ds_jv *e = &list->items[r];
        char where[64], name[64];
        snprintf(where, sizeof where, "shards[%u].", r);
        snprintf(name, sizeof name, "rank-%u-of-%u.bin", r, ck->world);
        long long rank = 0, bytes = 0, nsec = 0;
        const char *file = get_str(ck, e, "file", where, err);
        const char *digest = file ? get_str(ck, e, "digest", where, err) : NULL;
        if (!digest || get_int(ck, e, "rank", where, r, r, &rank, err) ||
            get_int(ck, e, "bytes", where, 0, INT64_MAX, &bytes, err) ||
            get_int(ck, e, "sections", where, 0, CKPT_MAX_SECTIONS, &nsec, err))
            return -1;
        if (strcmp(file, name) != 0)
            return ds_err_set(err, "%s: shards[%u] is \"%s\", expected \"%s\"", ck->meta_path, r,
                              file, name);
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/%s", ck->dir, name);
        ckpt_shard *s = &ck->shards[r];
        if (ckpt_shard_load(s, path, err)) return -1;
        char have[16];
        snprintf(have, sizeof have, "%08x", s->digest);
        if (s->rank != r || s->world != ck->world || s->step != (uint64_t)ck->step)
            return ds_err_set(err, "%s: header says rank %u of %u, step %llu; meta.json says "
                                   "rank %u of %u, step %lld", path, s->rank, s->world,
                              (unsigned long long)s->step, r, ck->world, (long long)ck->step);
        if (s->file_bytes != (uint64_t)bytes || s->nsections != (uint64_t)nsec ||
            strcmp(have, digest) != 0)
            return ds_err_set(err, "%s: not the shard meta.json describes (%llu bytes, %u "
                                   "sections, digest %s; meta.json: %lld, %lld, %s)", path,
                              (unsigned long long)s->file_bytes, s->nsections, have, bytes,
                              nsec, digest);
    }
    return 0;
}

static const ckpt_array *find_array(const ds_ckpt *ck, const char *name) {
    uint32_t lo = 0, hi = ck->narrays; /* sorted by name */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        int c = strcmp(ck->arrays[mid].name, name);
        if (c == 0) return &ck->arrays[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* The arrays rebuilt from the shards must be exactly those meta.json lists. */
static int check_arrays(ds_ckpt *ck, const ds_jv *meta, ds_err *err) {
    if (ckpt_build_arrays(ck->shards, ck->world, &ck->arrays, &ck->narrays, err))
        return ds_err_prefix(err, "%s", ck->dir);
    const ds_jv *list = get_typed(ck, meta, "arrays", DS_JV_ARR, err);
    if (!list) return -1;
    if (list->len != ck->narrays)
        return ds_err_set(err, "%s: lists %zu arrays, the shards hold %u", ck->meta_path,
                          list->len, ck->narrays);
    for (size_t i = 0; i < list->len; i++) {
        const ds_jv *e = &list->items[i];
        char where[48];
        snprintf(where, sizeof where, "arrays[%zu].", i);
        const char *name = get_str(ck, e, "name", where, err);
        const char *dtype = name ? get_str(ck, e, "dtype", where, err) : NULL;
        long long numel = 0;
        if (!dtype || get_int(ck, e, "numel", where, 0, INT64_MAX, &numel, err)) return -1;
        const ckpt_array *a = find_array(ck, name);
        if (!a)
            return ds_err_set(err, "%s: array '%s' is in no shard", ck->meta_path, name);
        ds_dtype t;
        if (ckpt_dtype_from_name(dtype, &t) || t != a->dtype || (uint64_t)numel != a->numel)
            return ds_err_set(err, "%s: array '%s' is %s x %lld, its shards hold %s x %llu",
                              ck->meta_path, name, dtype, numel, ckpt_dtype_name(a->dtype),
                              (unsigned long long)a->numel);
        const ds_jv *ranges = ds_jv_get(e, "ranges");
        if (!ranges || ranges->type != DS_JV_ARR || ranges->len != a->npieces)
            return ds_err_set(err, "%s: array '%s': ranges differ from its shards",
                              ck->meta_path, name);
        for (uint32_t k = 0; k < a->npieces; k++) {
            long long r = 0, b = 0, en = 0;
            if (get_int(ck, &ranges->items[k], "rank", where, 0, ck->world, &r, err) ||
                get_int(ck, &ranges->items[k], "begin", where, 0, INT64_MAX, &b, err) ||
                get_int(ck, &ranges->items[k], "end", where, 0, INT64_MAX, &en, err))
                return -1;
            const ckpt_piece *p = &a->pieces[k];
            if ((uint64_t)r != p->shard || (uint64_t)b != p->begin || (uint64_t)en != p->end)
                return ds_err_set(err, "%s: array '%s': range %u differs from its shards",
                                  ck->meta_path, name, k);
        }
    }
    return 0;
}

static int check_meta(ds_ckpt *ck, const ds_jv *meta, ds_err *err) {
    if (meta->type != DS_JV_OBJ)
        return ds_err_set(err, "%s: not a JSON object", ck->meta_path);
    const char *format = get_str(ck, meta, "format", "", err);
    if (!format) return -1;
    if (strcmp(format, "dslaunch-checkpoint") != 0)
        return ds_err_set(err, "%s: format \"%s\", expected \"dslaunch-checkpoint\"",
                          ck->meta_path, format);
    long long version = 0, step = 0, world = 0, chunk = 0;
    if (get_int(ck, meta, "version", "", 1, CKPT_VERSION, &version, err) ||
        get_int(ck, meta, "step", "", 0, INT64_MAX, &step, err) ||
        get_int(ck, meta, "world_size", "", 1, CKPT_MAX_WORLD, &world, err) ||
        get_int(ck, meta, "chunk_bytes", "", 4096, 1 << 30, &chunk, err))
        return -1;
    ck->step = step;
    ck->world = (uint32_t)world;
    if (check_engine(ck, meta, err) || load_shards(ck, meta, err)) return -1;
    for (uint32_t r = 0; r < ck->world; r++)
        if (ck->shards[r].chunk_bytes != (uint32_t)chunk)
            return ds_err_set(err, "%s: chunk size %u, meta.json says %lld", ck->shards[r].path,
                              ck->shards[r].chunk_bytes, chunk);
    return check_arrays(ck, meta, err);
}

ds_ckpt *ds_ckpt_open(const char *path, ds_err *err) {
    ds_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return ds_err_set(err, "out of memory"), NULL;
    if (resolve_dir(ck, path, err)) goto fail;
    snprintf(ck->meta_path, sizeof ck->meta_path, "%s/meta.json", ck->dir);
    size_t n;
    char *text = ckpt_read_small_file(ck->meta_path, META_MAX, &n, err);
    if (!text) goto fail;
    ds_err pe;
    ds_jv *meta = ds_jv_parse(text, n, &pe);
    free(text);
    if (!meta) {
        ds_err_set(err, "%s: not valid JSON: %s", ck->meta_path, pe.msg);
        goto fail;
    }
    int rc = check_meta(ck, meta, err);
    ds_jv_free(meta);
    if (rc == 0) return ck;
fail:
    ds_ckpt_close(ck);
    return NULL;
}

void ds_ckpt_close(ds_ckpt *ck) {
    if (!ck) return;
    if (ck->shards)
        for (uint32_t r = 0; r < ck->world; r++) {
            if (ck->fds && ck->fds[r] >= 0) close(ck->fds[r]);
            ckpt_shard_free(&ck->shards[r]);
        }
    free(ck->shards);
    free(ck->fds);
    ckpt_free_arrays(ck->arrays, ck->narrays);
    free(ck->engine);
    free(ck);
}

const char *ds_ckpt_dir(const ds_ckpt *ck) { return ck->dir; }
int64_t ds_ckpt_step(const ds_ckpt *ck) { return ck->step; }
int ds_ckpt_world(const ds_ckpt *ck) { return (int)ck->world; }
const char *ds_ckpt_meta_extra(const ds_ckpt *ck) { return ck->engine; }
uint32_t ds_ckpt_narrays(const ds_ckpt *ck) { return ck->narrays; }

void ds_ckpt_array_at(const ds_ckpt *ck, uint32_t i, ds_ckpt_array *out) {
    const ckpt_array *a = &ck->arrays[i];
    *out = (ds_ckpt_array){a->name, a->dtype, a->numel, a->npieces};
}

int ds_ckpt_array_info(const ds_ckpt *ck, const char *name, ds_ckpt_array *out,
                       ds_err *err) {
    const ckpt_array *a = find_array(ck, name);
    if (!a) return ds_err_set(err, "%s: no array '%s'", ck->meta_path, name);
    ds_ckpt_array_at(ck, (uint32_t)(a - ck->arrays), out);
    return 0;
}

int ds_ckpt_expect(const ds_ckpt *ck, const char *name, ds_dtype dtype, uint64_t numel,
                   ds_err *err) {
    ds_ckpt_array info;
    if (ds_ckpt_array_info(ck, name, &info, err)) return -1;
    if (info.dtype != dtype || info.numel != numel)
        return ds_err_set(err, "%s: array '%s' is %s x %llu, this run expects %s x %llu",
                          ck->meta_path, name, ckpt_dtype_name(info.dtype),
                          (unsigned long long)info.numel, ckpt_dtype_name(dtype),
                          (unsigned long long)numel);
    return 0;
}

static int shard_fd(ds_ckpt *ck, uint32_t r, ds_err *err) {
    if (ck->fds[r] < 0) {
        ck->fds[r] = open(ck->shards[r].path, O_RDONLY | O_CLOEXEC);
        if (ck->fds[r] < 0) return ds_err_errno(err, errno, "%s", ck->shards[r].path);
    }
    return ck->fds[r];
}

int ds_ckpt_read_range(ds_ckpt *ck, const char *name, uint64_t begin, uint64_t end,
                       void *dst, ds_err *err) {
    const ckpt_array *a = find_array(ck, name);
    if (!a) return ds_err_set(err, "%s: no array '%s'", ck->meta_path, name);
    if (begin > end || end > a->numel)
        return ds_err_set(err, "%s: array '%s': range [%llu,%llu) outside [0,%llu)",
                          ck->meta_path, name, (unsigned long long)begin,
                          (unsigned long long)end, (unsigned long long)a->numel);
    size_t esz = ckpt_dtype_size(a->dtype);
    uint32_t lo = 0, hi = a->npieces; /* first piece that ends after begin */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a->pieces[mid].end <= begin) lo = mid + 1;
        else hi = mid;
    }
    for (uint32_t k = lo; k < a->npieces && a->pieces[k].begin < end; k++) {
        const ckpt_piece *p = &a->pieces[k];
        uint64_t b = p->begin > begin ? p->begin : begin, e = p->end < end ? p->end : end;
        int fd = shard_fd(ck, p->shard, err);
        if (fd < 0) return -1;
        const ckpt_shard *s = &ck->shards[p->shard];
        if (ckpt_section_read(fd, s, &s->sections[p->section], b, e,
                              (char *)dst + (b - begin) * esz, err))
            return -1;
    }
    return 0;
}

void ds_ckpt_array_range(const ds_ckpt *ck, uint32_t i, uint32_t k, int *rank,
                         uint64_t *begin, uint64_t *end) {
    const ckpt_piece *p = &ck->arrays[i].pieces[k];
    *rank = (int)p->shard;
    *begin = p->begin;
    *end = p->end;
}

void ds_ckpt_shard_info(const ds_ckpt *ck, int r, const char **path, uint64_t *bytes,
                        uint32_t *nsections) {
    const ckpt_shard *s = &ck->shards[r];
    *path = s->path;
    *bytes = s->file_bytes;
    *nsections = s->nsections;
}

int ds_ckpt_verify_shard(ds_ckpt *ck, int r, ds_err *err) {
    if (r < 0 || (uint32_t)r >= ck->world)
        return ds_err_set(err, "%s: no rank %d", ck->meta_path, r);
    const ckpt_shard *s = &ck->shards[r];
    int fd = shard_fd(ck, (uint32_t)r, err);
    if (fd < 0) return -1;
    void *buf = malloc(s->chunk_bytes);
    if (!buf) return ds_err_set(err, "out of memory");
    for (uint32_t i = 0; i < s->nsections; i++) {
        const ckpt_section *sec = &s->sections[i];
        uint64_t step = s->chunk_bytes / ckpt_dtype_size(sec->dtype); /* whole chunks */
        for (uint64_t b = sec->begin; b < sec->end; b += step) {
            uint64_t e = sec->end - b < step ? sec->end : b + step;
            if (ckpt_section_read(fd, s, sec, b, e, buf, err)) {
                free(buf);
                return -1;
            }
        }
    }
    free(buf);
    return 0;
}

int ds_ckpt_verify(ds_ckpt *ck, ds_err *err) {
    for (uint32_t r = 0; r < ck->world; r++)
        if (ds_ckpt_verify_shard(ck, (int)r, err)) return -1;
    return 0;
}
