#include "ckpt_test_util.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

size_t test_esize(ds_dtype t) { return t == DS_F32 || t == DS_I32 ? 4 : 2; }

char *make_scratch_dir(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/ds-ckpt-test-XXXXXX", base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

void rm_rf(const char *path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

void fill_array(test_array *a, uint32_t seed) {
    size_t esz = test_esize(a->dtype);
    free(a->data);
    a->data = malloc(a->numel * esz + 1);
    for (uint64_t i = 0; i < a->numel; i++) {
        uint32_t x = seed * 2654435761u ^ (uint32_t)(i * 40503u + 17);
        x ^= x >> 13;
        if (a->dtype == DS_F32) ((float *)a->data)[i] = (float)x / 4096.0f;
        else if (a->dtype == DS_I32) ((int32_t *)a->data)[i] = (int32_t)x;
        else ((uint16_t *)a->data)[i] = (uint16_t)x;
    }
}

void free_arrays(test_array *a, int n) {
    for (int i = 0; i < n; i++) {
        free(a[i].data);
        a[i].data = NULL;
    }
}

void zero_range(uint64_t n, int world, int rank, uint64_t *begin, uint64_t *end) {
    uint64_t s = (n + (uint64_t)world - 1) / (uint64_t)world;
    uint64_t b = s * (uint64_t)rank, e = b + s;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}

static int add_rank(ds_ckpt_writer *w, int world, int rank, test_array *a, int n, ds_err *err) {
    int rc = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b, e;
        if (a[i].only_rank0) {
            if (rank != 0) continue;
            b = 0, e = a[i].numel;
        } else {
            zero_range(a[i].numel, world, rank, &b, &e);
        }
        const char *p = (const char *)a[i].data + b * test_esize(a[i].dtype);
        if (ds_ckpt_writer_add(w, a[i].name, a[i].dtype, a[i].numel, b, e, p, err)) rc = -1;
    }
    return rc;
}

static int no_barrier(void *arg, ds_err *err) {
    (void)arg, (void)err;
    return 0;
}

int save_sequential(const char *dir, int64_t step, int world, test_array *a, int n,
                    const char *engine_json, ds_err *err) {
    int rc0 = 0;
    for (int r = world - 1; r >= 0; r--) {
        ds_err e = {""};
        ds_ckpt_writer *w = ds_ckpt_writer_begin(dir, step, r, world, &e);
        if (!w) {
            *err = e;
            return -1;
        }
        add_rank(w, world, r, a, n, &e);
        int rc = ds_ckpt_writer_commit(w, engine_json, no_barrier, NULL, &e);
        if (rc && rc0 == 0) *err = e;
        if (rc) rc0 = -1;
    }
    return rc0;
}

/* --- forked ranks --- */

typedef struct pipe_barrier {
    int up, down; /* child's ends: write "arrived", read "go" */
} pipe_barrier;

static int child_barrier(void *arg, ds_err *err) {
    pipe_barrier *b = arg;
    char c = 'a';
    if (write(b->up, &c, 1) != 1) return ds_err_errno(err, errno, "barrier write");
    ssize_t k = read(b->down, &c, 1);
    if (k != 1 || c != 'g') return ds_err_set(err, "barrier: a peer is gone");
    return 0;
}

int save_forked(const char *dir, int64_t step, int world, test_array *a, int n,
                const char *kill_at, int *status) {
    int up[64][2], down[64][2];
    pid_t pid[64];
    for (int r = 0; r < world; r++)
        if (pipe(up[r]) || pipe(down[r])) return -1;
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] < 0) return -1;
        if (pid[r] == 0) {
            for (int k = 0; k < world; k++) {
                if (k != r) close(up[k][1]), close(down[k][0]);
                close(up[k][0]), close(down[k][1]);
            }
            if (kill_at) setenv("DS_CKPT_TEST_KILL_AT", kill_at, 1);
            pipe_barrier b = {up[r][1], down[r][0]};
            ds_err e = {""};
            ds_ckpt_writer *w = ds_ckpt_writer_begin(dir, step, r, world, &e);
            if (!w) _exit(3);
            add_rank(w, world, r, a, n, &e);
            int rc = ds_ckpt_writer_commit(w, "{\"who\":\"forked\"}", child_barrier, &b, &e);
            if (rc) fprintf(stderr, "rank %d: %s\n", r, e.msg);
            _exit(rc ? 1 : 0);
        }
    }
    for (int r = 0; r < world; r++) close(up[r][1]), close(down[r][0]);
    /* Two barrier rounds; a rank that is gone (EOF) releases the others with failure. */
    int alive = 1;
    for (int round = 0; round < 2 && alive; round++) {
        for (int r = 0; r < world; r++) {
            char c;
            if (read(up[r][0], &c, 1) != 1) alive = 0;
        }
        char go = alive ? 'g' : 'x';
        for (int r = 0; r < world; r++) (void)!write(down[r][1], &go, 1);
    }
    for (int r = 0; r < world; r++) close(up[r][0]), close(down[r][1]);
    int all_ok = 1;
    for (int r = 0; r < world; r++) {
        waitpid(pid[r], &status[r], 0);
        if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0) all_ok = 0;
    }
    return all_ok ? 0 : -1;
}

int check_read_as(ds_ckpt *ck, const test_array *a, int world) {
    size_t esz = test_esize(a->dtype);
    for (int r = 0; r < world; r++) {
        uint64_t b, e;
        zero_range(a->numel, world, r, &b, &e);
        char *buf = malloc((e - b) * esz + 1);
        ds_err err = {""};
        int rc = ds_ckpt_read_range(ck, a->name, b, e, buf, &err);
        if (rc) fprintf(stderr, "read %s [%llu,%llu): %s\n", a->name, (unsigned long long)b,
                        (unsigned long long)e, err.msg);
        if (rc == 0 && memcmp(buf, (const char *)a->data + b * esz, (e - b) * esz) != 0) rc = -1;
        free(buf);
        if (rc) return -1;
    }
    return 0;
}

void corrupt_byte(const char *path, long offset_from_end) {
    FILE *f = fopen(path, "r+b");
    fseek(f, -offset_from_end, SEEK_END);
    int c = fgetc(f);
    fseek(f, -offset_from_end, SEEK_END);
    fputc(c ^ 0x40, f);
    fclose(f);
}

void truncate_by(const char *path, long bytes) {
    struct stat st;
    stat(path, &st);
    (void)!truncate(path, st.st_size - bytes);
}

char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    s[fread(s, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return s;
}

void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}
