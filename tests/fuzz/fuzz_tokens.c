/* libFuzzer: the data path from a user's bytes to a training batch (runtime/data).
 *   1. The byte-level tokenizer under each documents mode: every token is in the
 *      vocabulary, and without document breaks the tokens are exactly the input's bytes
 *      (with one end-of-text after them in "file" mode), as docs/data.md promises.
 *   2. The same bytes as a token file (the magic and version put in place so the header's
 *      other fields are what gets fuzzed): whatever opens gives, through the loader, the
 *      windows ds_loader_window_start names, token for token; anything else is refused
 *      with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bytetok.h"
#include "loader.h"

typedef struct collected {
    uint32_t *t;
    size_t n, cap;
} collected;

static int collect(void *ctx, const uint32_t *tokens, size_t n, ds_err *err) {
    (void)err;
    collected *c = ctx;
    if (c->n + n > c->cap) {
        c->cap = (c->n + n) * 2;
        if (!(c->t = realloc(c->t, c->cap * sizeof *c->t))) abort();
    }
    memcpy(c->t + c->n, tokens, n * sizeof *tokens);
    c->n += n;
    return 0;
}

static void tokenizer(const uint8_t *s, size_t n, ds_docs_mode mode) {
    collected c = {0};
    ds_err err = {{0}};
    if (ds_bytetok_encode(s, n, mode, collect, &c, &err) != 0) abort(); /* any bytes encode */
    for (size_t i = 0; i < c.n; i++)
        if (c.t[i] >= DS_BYTETOK_VOCAB) abort();
    if (mode != DS_DOCS_BLANK) {
        size_t want = n + (mode == DS_DOCS_FILE && n > 0);
        if (c.n != want) abort();
        for (size_t i = 0; i < n; i++)
            if (c.t[i] != s[i]) abort();
        if (want > n && c.t[n] != DS_BYTETOK_EOT) abort();
    }
    free(c.t);
}

static void loader(const char *path, const uint8_t *knobs) {
    ds_loader_opts o = {.path = path, .context = 1 + knobs[0] % 16, .batch = 1 + knobs[1] % 4,
                        .seed = knobs[2], .world_size = 1 + knobs[3] % 3, .vocab = 0,
                        .validate = 1};
    o.rank = knobs[4] % o.world_size;
    ds_loader ld;
    ds_err err = {{0}};
    if (ds_loader_open(&ld, &o, &err) != 0) {
        if (!err.msg[0]) abort();
        return;
    }
    size_t len = (size_t)(o.batch * o.context);
    int32_t *x = malloc(len * sizeof *x), *y = malloc(len * sizeof *y);
    if (!x || !y) abort();
    for (int64_t step = 0; step < 3; step++) {
        if (ds_loader_batch(&ld, step, 0, x, y, &err) != 0) abort(); /* validated at open */
        for (int64_t b = 0; b < o.batch; b++) {
            uint64_t g = (uint64_t)(o.rank * o.batch + b);
            uint64_t start = ds_loader_window_start(&ld, (uint64_t)step, 0, g);
            if (start + (uint64_t)o.context >= ld.tf.count) abort();
            for (int64_t t = 0; t < o.context; t++) {
                if ((uint32_t)x[b * o.context + t] != ds_tokfile_get(&ld.tf, start + (uint64_t)t) ||
                    (uint32_t)y[b * o.context + t] != ds_tokfile_get(&ld.tf, start + (uint64_t)t + 1))
                    abort();
            }
        }
    }
    free(x);
    free(y);
    ds_loader_close(&ld);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    const uint8_t *knobs = data; /* mode and loader options */
    data += 8, size -= 8;
    tokenizer(data, size, (ds_docs_mode)(knobs[7] % 3));
    if (size < DS_TOKFILE_HEADER) return 0;

    uint8_t *f = malloc(size);
    if (!f) abort();
    memcpy(f, data, size);
    memcpy(f, DS_TOKFILE_MAGIC, 8);
    f[8] = 1, f[9] = f[10] = f[11] = 0; /* version 1, little-endian */
    int fd = memfd_create("tokens", MFD_CLOEXEC);
    if (fd < 0 || write(fd, f, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    loader(path, knobs);
    close(fd);
    free(f);
    return 0;
}
