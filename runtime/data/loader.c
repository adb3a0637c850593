#include "loader.h"

#include <string.h>

static uint64_t mix(uint64_t z) {
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static int check_opts(const ds_loader_opts *o, ds_err *err) {
    if (o->context < 1)
        return ds_err_set(err, "data: context %lld (>= 1 expected)", (long long)o->context);
    if (o->batch < 1)
        return ds_err_set(err, "data: batch %lld (>= 1 expected)", (long long)o->batch);
    if (o->world_size < 1)
        return ds_err_set(err, "data: world_size %d (>= 1 expected)", o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return ds_err_set(err, "data: rank %d outside the world of %d", o->rank, o->world_size);
    if (o->vocab > (uint32_t)INT32_MAX)
        return ds_err_set(err, "data: vocab %u does not fit int32 tokens", o->vocab);
    if (o->batch > INT32_MAX / o->context)
        return ds_err_set(err, "data: batch %lld x context %lld is too large",
                          (long long)o->batch, (long long)o->context);
    return 0;
}

int ds_loader_open(ds_loader *ld, const ds_loader_opts *o, ds_err *err) {
    memset(ld, 0, sizeof *ld);
    if (check_opts(o, err) != 0) return -1;
    if (ds_tokfile_open(&ld->tf, o->path, err) != 0) return -1;
    const char *path = ld->tf.path;
    uint32_t fv = ld->tf.vocab;
    if (o->vocab && fv > o->vocab) {
        ds_err_set(err, "%s: the file's vocab %u is larger than the model's %u", path, fv,
                   o->vocab);
        goto fail;
    }
    ld->vocab = o->vocab ? o->vocab : fv;
    if ((uint64_t)o->context >= ld->tf.count) {
        ds_err_set(err, "%s: %llu tokens, too few for one window of context %lld (needs %lld)",
                   path, (unsigned long long)ld->tf.count, (long long)o->context,
                   (long long)o->context + 1);
        goto fail;
    }
    if (o->validate &&
        ds_tokfile_check_range(&ld->tf, ld->vocab ? ld->vocab : (uint32_t)INT32_MAX + 1, err) != 0)
        goto fail;
    ld->context = o->context;
    ld->batch = o->batch;
    ld->seed = o->seed;
    ld->rank = o->rank;
    ld->world_size = o->world_size;
    ld->nstarts = ld->tf.count - (uint64_t)o->context;
    return 0;
fail:
    ds_tokfile_close(&ld->tf);
    return -1;
}

void ds_loader_close(ds_loader *ld) { ds_tokfile_close(&ld->tf); }

uint64_t ds_loader_window_start(const ds_loader *ld, uint64_t step, uint64_t micro, uint64_t g) {
    uint64_t h = mix(mix(mix(mix(ld->seed) ^ step) ^ micro) ^ g);
    return (uint64_t)(((unsigned __int128)h * ld->nstarts) >> 64);
}

int ds_loader_batch(const ds_loader *ld, int64_t step, int64_t micro, int32_t *x, int32_t *y,
                    ds_err *err) {
    if (step < 0 || micro < 0)
        return ds_err_set(err, "data: step %lld, micro-step %lld (>= 0 expected)",
                          (long long)step, (long long)micro);
    uint64_t limit = ld->vocab ? ld->vocab : (uint64_t)INT32_MAX + 1;
    int64_t T = ld->context;
    for (int64_t b = 0; b < ld->batch; b++) {
        uint64_t g = (uint64_t)ld->rank * (uint64_t)ld->batch + (uint64_t)b;
        uint64_t s = ds_loader_window_start(ld, (uint64_t)step, (uint64_t)micro, g);
        int32_t *xr = x + b * T, *yr = y + b * T;
        for (int64_t t = 0; t <= T; t++) {
            uint32_t tok = ds_tokfile_get(&ld->tf, s + (uint64_t)t);
            if (tok >= limit)
                return ds_err_set(err, "%s: token %u at index %llu is out of range for vocab %llu",
                                  ld->tf.path, tok, (unsigned long long)(s + (uint64_t)t),
                                  (unsigned long long)limit);
            if (t < T) xr[t] = (int32_t)tok;
            if (t > 0) yr[t - 1] = (int32_t)tok;
        }
    }
    return 0;
}
