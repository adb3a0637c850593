/* Saving: each rank streams its sections into rank-<r>-of-<W>.bin.tmp, makes it durable
 * and renames it; rank 0 then checks every shard and commits the step with meta.json and
 * `latest`, in that order, each through temp + fsync + rename + directory fsync. A crash
 * anywhere before the rename of `latest` leaves the previous `latest` as it was. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_format.h"
#include "crc32c.h"
#include "ds_json.h"
#include "ds_json_read.h"

/* Where a test may stop a rank dead (DS_CKPT_TEST_KILL_AT="rank:point"): after that many
 * payload bytes of its shard, or just before meta.json or `latest` is written. */
enum { KILL_NONE, KILL_AT_BYTES, KILL_BEFORE_META, KILL_BEFORE_LATEST };

struct ds_ckpt_writer {
    char dir[4096], stepdir[4096], path[4096], tmp[4096];
    char stepname[32];
    int64_t step;
    int rank, world;
    int fd;
    uint64_t off, payload_written;
    ckpt_section *secs;
    uint32_t nsecs, cap;
    uint32_t digest;
    int failed;
    ds_err first; /* the first error, reported by commit */
    int kill;
    uint64_t kill_bytes;
};

static int fmt_path(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fmt_path(char *out, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, cap, fmt, ap);
    va_end(ap);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

/* Keeps the first error; later calls on the writer report it again. */
static int fail(ds_ckpt_writer *w, ds_err *err, const ds_err *e) {
    if (!w->failed) {
        w->first = *e;
        w->failed = 1;
    }
    if (err) *err = w->first;
    return -1;
}

static void read_kill_hook(ds_ckpt_writer *w) {
    const char *v = getenv("DS_CKPT_TEST_KILL_AT");
    if (!v) return;
    char *end;
    long r = strtol(v, &end, 10);
    if (*end != ':' || r != w->rank) return;
    const char *what = end + 1;
    if (strcmp(what, "before-meta") == 0) w->kill = KILL_BEFORE_META;
    else if (strcmp(what, "before-latest") == 0) w->kill = KILL_BEFORE_LATEST;
    else {
        w->kill_bytes = strtoull(what, &end, 10);
        if (*end == '\0') w->kill = KILL_AT_BYTES;
    }
}

static void maybe_die(ds_ckpt_writer *w, int point) {
    if (w->kill == point && (point != KILL_AT_BYTES || w->payload_written >= w->kill_bytes))
        raise(SIGKILL);
}

static int mkdir_p(const char *path, ds_err *err) {
    char buf[4096];
    if (fmt_path(buf, sizeof buf, "%s", path)) return ds_err_set(err, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, (mode_t)ckpt_dir_mode()) == 0) chmod(buf, (mode_t)ckpt_dir_mode()); /* past the umask */
        else if (errno != EEXIST) return ds_err_errno(err, errno, "%s: cannot create directory", buf);
        *p = c;
        if (c == '\0') return 0;
    }
}

static int start_shard(ds_ckpt_writer *w, ds_err *e) {
    if (mkdir_p(w->stepdir, e)) return -1;
    char latest[64];
    int has = ds_ckpt_latest(w->dir, latest, sizeof latest, e);
    if (has < 0) return -1;
    if (has && strcmp(latest, w->stepname) == 0)
        return ds_err_set(e, "%s: %s is the latest checkpoint; saving the same step again "
                             "would overwrite it", w->dir, w->stepname);
    /* What an earlier, unfinished save of this step left must never pass for part of
     * this one: its meta.json goes first (so the step reads as incomplete), then each
     * rank's own old shard. Nobody reads these before commit's barrier. */
    char meta[4096 + 16];
    if (w->rank == 0) {
        if (fmt_path(meta, sizeof meta, "%s/meta.json", w->stepdir))
            return ds_err_set(e, "%s: path too long", w->stepdir);
        if (unlink(meta) != 0 && errno != ENOENT)
            return ds_err_errno(e, errno, "%s: cannot remove", meta);
    }
    if (unlink(w->path) != 0 && errno != ENOENT)
        return ds_err_errno(e, errno, "%s: cannot remove", w->path);
    if (ckpt_fsync_dir(w->stepdir, e)) return -1;
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, ckpt_file_mode());
    if (w->fd < 0) return ds_err_errno(e, errno, "%s: cannot create", w->tmp);
    fchmod(w->fd, (mode_t)ckpt_file_mode());
    unsigned char zero[CKPT_FILE_HEADER] = {0}; /* the real header is written by commit */
    if (ckpt_write_all(w->fd, zero, sizeof zero))
        return ds_err_errno(e, errno, "%s: write", w->tmp);
    w->off = CKPT_FILE_HEADER;
    return 0;
}

ds_ckpt_writer *ds_ckpt_writer_begin(const char *dir, int64_t step, int rank, int world,
                                     ds_err *err) {
    if (!dir || !dir[0] || step < 0 || world < 1 || world > CKPT_MAX_WORLD || rank < 0 || rank >= world)
        return ds_err_set(err, "checkpoint save: bad arguments (step %lld, rank %d, world %d)",
                          (long long)step, rank, world), NULL;
    ds_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return ds_err_set(err, "checkpoint save: out of memory"), NULL;
    w->step = step;
    w->rank = rank;
    w->world = world;
    w->fd = -1;
    snprintf(w->stepname, sizeof w->stepname, "step-%lld", (long long)step);
    ds_err e = {""};
    if (fmt_path(w->dir, sizeof w->dir, "%s", dir) ||
        fmt_path(w->stepdir, sizeof w->stepdir, "%s/%s", dir, w->stepname) ||
        fmt_path(w->path, sizeof w->path, "%s/rank-%d-of-%d.bin", w->stepdir, rank, world) ||
        fmt_path(w->tmp, sizeof w->tmp, "%s.tmp", w->path)) {
        ds_err_set(&e, "%s: path too long", dir);
        fail(w, NULL, &e);
        return w;
    }
    read_kill_hook(w);
    if (start_shard(w, &e)) fail(w, NULL, &e);
    return w;
}

static int checked_section(ds_ckpt_writer *w, const char *name, ds_dtype dtype,
                           uint64_t total, uint64_t begin, uint64_t end, const void *data,
                           ds_err *e) {
    if (!name || !ckpt_name_ok(name))
        return ds_err_set(e, "checkpoint save: bad array name '%s' (1..%d of A-Z a-z 0-9 _ . / -)",
                          name ? name : "(null)", CKPT_NAME_MAX);
    if (ckpt_dtype_code(dtype) < 0)
        return ds_err_set(e, "checkpoint save: array '%s': unknown dtype %d", name, (int)dtype);
    if (begin > end || end > total)
        return ds_err_set(e, "checkpoint save: array '%s': range [%llu,%llu) outside [0,%llu)",
                          name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)total);
    if (end > begin && !data)
        return ds_err_set(e, "checkpoint save: array '%s': no data", name);
    if (end - begin > UINT64_MAX / 8)
        return ds_err_set(e, "checkpoint save: array '%s': too large", name);
    if (w->nsecs >= CKPT_MAX_SECTIONS)
        return ds_err_set(e, "checkpoint save: more than %d arrays in one shard", CKPT_MAX_SECTIONS);
    for (uint32_t i = 0; i < w->nsecs; i++)
        if (strcmp(w->secs[i].name, name) == 0)
            return ds_err_set(e, "checkpoint save: array '%s' added twice by rank %d", name,
                              w->rank);
    return 0;
}

static int write_payload(ds_ckpt_writer *w, const unsigned char *p, uint64_t n, ds_err *e) {
    while (n) {
        size_t k = n > CKPT_CHUNK ? CKPT_CHUNK : (size_t)n;
        if (ckpt_write_all(w->fd, p, k)) return ds_err_errno(e, errno, "%s: write", w->tmp);
        p += k;
        n -= k;
        w->payload_written += k;
        maybe_die(w, KILL_AT_BYTES);
    }
    return 0;
}

int ds_ckpt_writer_add(ds_ckpt_writer *w, const char *name, ds_dtype dtype,
                       uint64_t total_numel, uint64_t begin, uint64_t end, const void *data,
                       ds_err *err) {
    if (!w) return ds_err_set(err, "checkpoint save: no writer");
    if (w->failed) return fail(w, err, &w->first);
    ds_err e = {""};
    if (checked_section(w, name, dtype, total_numel, begin, end, data, &e)) return fail(w, err, &e);
    if (w->nsecs == w->cap) {
        uint32_t nc = w->cap ? 2 * w->cap : 16;
        ckpt_section *s = realloc(w->secs, nc * sizeof *s);
        if (!s) return ds_err_set(&e, "checkpoint save: out of memory"), fail(w, err, &e);
        w->secs = s;
        w->cap = nc;
    }
    ckpt_section *sec = &w->secs[w->nsecs];
    memset(sec, 0, sizeof *sec);
    snprintf(sec->name, sizeof sec->name, "%s", name);
    sec->dtype = dtype;
    sec->total = total_numel;
    sec->begin = begin;
    sec->end = end;
    sec->payload_bytes = (end - begin) * ckpt_dtype_size(dtype);
    sec->nchunks = (uint32_t)((sec->payload_bytes + CKPT_CHUNK - 1) / CKPT_CHUNK);
    sec->chunk_crc = malloc(sec->nchunks ? 4 * (size_t)sec->nchunks : 1);
    size_t block = ckpt_sect_block_len(sec);
    uint64_t pad = (CKPT_ALIGN - (w->off + block) % CKPT_ALIGN) % CKPT_ALIGN;
    unsigned char *hdr = malloc(block + pad);
    if (!sec->chunk_crc || !hdr) {
        free(sec->chunk_crc);
        free(hdr);
        return ds_err_set(&e, "checkpoint save: out of memory"), fail(w, err, &e);
    }
    w->nsecs++; /* owned by the writer from here: freed with it */
    const unsigned char *p = data;
    for (uint32_t c = 0; c < sec->nchunks; c++) {
        uint64_t c0 = (uint64_t)c * CKPT_CHUNK;
        uint64_t len = sec->payload_bytes - c0 < CKPT_CHUNK ? sec->payload_bytes - c0 : CKPT_CHUNK;
        sec->chunk_crc[c] = ds_crc32c(0, p + c0, len);
    }
    sec->payload_off = w->off + block + pad;
    ckpt_encode_sect_block(hdr, sec, sec->payload_off + sec->payload_bytes);
    memset(hdr + block, 0, pad);
    w->digest = ds_crc32c(w->digest, hdr, block);
    int rc = ckpt_write_all(w->fd, hdr, block + pad);
    free(hdr);
    if (rc) return ds_err_errno(&e, errno, "%s: write", w->tmp), fail(w, err, &e);
    if (write_payload(w, p, sec->payload_bytes, &e)) return fail(w, err, &e);
    w->off = sec->payload_off + sec->payload_bytes;
    return 0;
}

/* Header last, then fsync, rename and fsync the directory: the final name only ever
 * names a complete, durable shard. */
static int finish_shard(ds_ckpt_writer *w, ds_err *e) {
    ckpt_shard s = {.rank = (uint32_t)w->rank, .world = (uint32_t)w->world,
                    .nsections = w->nsecs, .chunk_bytes = CKPT_CHUNK, .digest = w->digest,
                    .step = (uint64_t)w->step, .file_bytes = w->off};
    unsigned char h[CKPT_FILE_HEADER];
    ckpt_encode_file_header(h, &s);
    if (pwrite(w->fd, h, sizeof h, 0) != (ssize_t)sizeof h || fsync(w->fd) != 0)
        return ds_err_errno(e, errno, "%s: write", w->tmp);
    int rc = close(w->fd);
    w->fd = -1;
    if (rc != 0) return ds_err_errno(e, errno, "%s: close", w->tmp);
    if (rename(w->tmp, w->path) != 0)
        return ds_err_errno(e, errno, "%s: cannot rename to %s", w->tmp, w->path);
    return ckpt_fsync_dir(w->stepdir, e);
}

static void emit_arrays(ds_json *j, const ckpt_array *a, uint32_t na, const ckpt_shard *shards) {
    ds_json_key(j, "arrays");
    ds_json_arr(j);
    for (uint32_t i = 0; i < na; i++) {
        ds_json_obj(j);
        ds_json_kstr(j, "name", a[i].name);
        ds_json_kstr(j, "dtype", ckpt_dtype_name(a[i].dtype));
        ds_json_kint(j, "numel", (long long)a[i].numel);
        ds_json_key(j, "ranges");
        ds_json_arr(j);
        for (uint32_t k = 0; k < a[i].npieces; k++) {
            ds_json_obj(j);
            ds_json_kint(j, "rank", shards[a[i].pieces[k].shard].rank);
            ds_json_kint(j, "begin", (long long)a[i].pieces[k].begin);
            ds_json_kint(j, "end", (long long)a[i].pieces[k].end);
            ds_json_end(j);
        }
        ds_json_end(j);
        ds_json_end(j);
    }
    ds_json_end(j);
}

static void emit_shards(ds_json *j, const ckpt_shard *shards, int world) {
    ds_json_key(j, "shards");
    ds_json_arr(j);
    for (int r = 0; r < world; r++) {
        char name[64], digest[16];
        snprintf(name, sizeof name, "rank-%d-of-%d.bin", r, world);
        snprintf(digest, sizeof digest, "%08x", shards[r].digest);
        ds_json_obj(j);
        ds_json_kint(j, "rank", r);
        ds_json_kstr(j, "file", name);
        ds_json_kint(j, "bytes", (long long)shards[r].file_bytes);
        ds_json_kint(j, "sections", shards[r].nsections);
        ds_json_kstr(j, "digest", digest);
        ds_json_end(j);
    }
    ds_json_end(j);
}

/* The canonical (compact) text of the engine's object: its checksum is what meta.json
 * records, whatever spacing the file ends up with. Canonical means a fixed point of
 * parse + emit; one round is not always one (the writer turns invalid UTF-8 into an
 * escaped U+FFFD, which reads back as the character itself), two rounds are. */
static int engine_canonical(const char *engine_json, ds_jv **tree, char **text, ds_err *e) {
    const char *src = engine_json ? engine_json : "{}";
    ds_err pe;
    *tree = ds_jv_parse(src, strlen(src), &pe);
    if (!*tree) return ds_err_set(e, "checkpoint save: engine state is not JSON: %s", pe.msg);
    if ((*tree)->type != DS_JV_OBJ)
        return ds_err_set(e, "checkpoint save: engine state must be a JSON object");
    /* meta.json holds it one level down, and must stay readable by the same parser. */
    if (ds_jv_depth(*tree) > DS_JV_MAX_DEPTH - 1)
        return ds_err_set(e, "checkpoint save: engine state nests deeper than %d levels",
                          DS_JV_MAX_DEPTH - 1);
    for (int round = 0; round < 2; round++) {
        ds_json j;
        ds_json_init_buf(&j, 0);
        ds_jv_emit(&j, *tree);
        if (j.bad) {
            ds_buf_free(&j.text);
            return ds_err_set(e, "checkpoint save: out of memory");
        }
        if (round == 1) {
            *text = (char *)j.text.data; /* the caller frees it */
            break;
        }
        ds_jv_free(*tree);
        *tree = ds_jv_parse(ds_buf_str(&j.text), j.text.len, &pe);
        ds_buf_free(&j.text);
        if (!*tree) return ds_err_set(e, "checkpoint save: engine state: %s", pe.msg);
    }
    return 0;
}

/* Shards of an earlier, crashed save of this step with another world size (and their
 * temporary files) are not part of the step: once it is committed, they go. Only names
 * this part writes are touched. */
static void remove_leftovers(ds_ckpt_writer *w) {
    DIR *d = opendir(w->stepdir);
    if (!d) return;
    char mine[64];
    snprintf(mine, sizeof mine, "-of-%d.bin", w->world);
    size_t ml = strlen(mine);
    struct dirent *ent;
    while ((ent = readdir(d))) {
        const char *n = ent->d_name;
        size_t len = strlen(n);
        if (strncmp(n, "rank-", 5) != 0) continue;
        if (len > ml && strcmp(n + len - ml, mine) == 0) continue; /* this save's */
        char path[4096 + 256];
        snprintf(path, sizeof path, "%s/%s", w->stepdir, n);
        unlink(path);
    }
    closedir(d);
}

static int write_meta(ds_ckpt_writer *w, const ckpt_shard *shards, const char *engine_json,
                      ds_err *e) {
    ckpt_array *arrays = NULL;
    uint32_t na = 0;
    ds_jv *tree = NULL;
    char *canon = NULL;
    int rc = -1;
    if (ckpt_build_arrays(shards, (uint32_t)w->world, &arrays, &na, e)) {
        ds_err_prefix(e, "%s", w->stepdir);
        goto out;
    }
    if (engine_canonical(engine_json, &tree, &canon, e)) goto out;
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", ds_crc32c(0, canon, strlen(canon)));
    ds_json j;
    ds_json_init_buf(&j, 1);
    ds_json_obj(&j);
    ds_json_kstr(&j, "format", "dslaunch-checkpoint");
    ds_json_kint(&j, "version", CKPT_VERSION);
    ds_json_kint(&j, "step", w->step);
    ds_json_kint(&j, "world_size", w->world);
    ds_json_kint(&j, "chunk_bytes", CKPT_CHUNK);
    emit_arrays(&j, arrays, na, shards);
    emit_shards(&j, shards, w->world);
    ds_json_kstr(&j, "engine_crc32c", crc);
    ds_json_key(&j, "engine");
    ds_jv_emit(&j, tree);
    ds_json_end(&j);
    ds_json_newline(&j);
    if (j.bad) {
        ds_err_set(e, "%s: cannot build meta.json (out of memory)", w->stepdir);
    } else {
        maybe_die(w, KILL_BEFORE_META);
        if (ckpt_write_file_atomic(w->stepdir, "meta.json", ds_buf_str(&j.text), j.text.len, e) == 0) {
            maybe_die(w, KILL_BEFORE_LATEST);
            char line[48];
            int n = snprintf(line, sizeof line, "%s\n", w->stepname);
            rc = ckpt_write_file_atomic(w->dir, "latest", line, (size_t)n, e);
            if (rc == 0) remove_leftovers(w);
        }
    }
    ds_buf_free(&j.text);
out:
    ckpt_free_arrays(arrays, na);
    ds_jv_free(tree);
    free(canon);
    return rc;
}

/* Rank 0, after the first barrier: every rank's shard must be there, whole, and from
 * this save (step and world in its header), before meta.json may name it. */
static int commit_step(ds_ckpt_writer *w, const char *engine_json, ds_err *e) {
    ckpt_shard *shards = calloc((size_t)w->world, sizeof *shards);
    if (!shards) return ds_err_set(e, "checkpoint save: out of memory");
    int loaded = 0, rc = -1;
    for (; loaded < w->world; loaded++) {
        char path[4096 + 64];
        snprintf(path, sizeof path, "%s/rank-%d-of-%d.bin", w->stepdir, loaded, w->world);
        if (ckpt_shard_load(&shards[loaded], path, e)) goto out;
        const ckpt_shard *s = &shards[loaded];
        if (s->rank != (uint32_t)loaded || s->world != (uint32_t)w->world ||
            s->step != (uint64_t)w->step) {
            ds_err_set(e, "%s: header says rank %u of %u, step %llu; expected rank %d of %d, "
                          "step %lld", path, s->rank, s->world, (unsigned long long)s->step,
                       loaded, w->world, (long long)w->step);
            loaded++;
            goto out;
        }
    }
    rc = write_meta(w, shards, engine_json, e);
out:
    for (int i = 0; i < loaded; i++) ckpt_shard_free(&shards[i]);
    free(shards);
    return rc;
}

static void free_writer(ds_ckpt_writer *w) {
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp);
    }
    for (uint32_t i = 0; i < w->nsecs; i++) free(w->secs[i].chunk_crc);
    free(w->secs);
    free(w);
}

int ds_ckpt_writer_commit(ds_ckpt_writer *w, const char *engine_json, ds_ckpt_barrier_fn barrier,
                          void *arg, ds_err *err) {
    if (!w) return ds_err_set(err, "checkpoint save: no writer");
    ds_err e = {""};
    if (!w->failed && finish_shard(w, &e)) fail(w, NULL, &e);
    if (barrier && barrier(arg, &e)) {
        ds_err_prefix(&e, "checkpoint save, rank %d: barrier", w->rank);
        fail(w, NULL, &e);
        goto out; /* a peer is gone: the second barrier would not return either */
    }
    if (w->rank == 0 && !w->failed && commit_step(w, engine_json, &e)) fail(w, NULL, &e);
    if (barrier && barrier(arg, &e)) fail(w, NULL, &e);
out:;
    int rc = w->failed ? -1 : 0;
    if (rc && err) *err = w->first;
    free_writer(w);
    return rc;
}

void ds_ckpt_writer_fail(ds_ckpt_writer *w, const char *why) {
    ds_err e;
    ds_err_set(&e, "%s", why);
    if (w) fail(w, NULL, &e);
}

void ds_ckpt_writer_abort(ds_ckpt_writer *w) {
    if (w) free_writer(w);
}
