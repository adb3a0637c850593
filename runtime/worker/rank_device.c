/* The device a rank computes on, from the job's [engine] device (DS_ENGINE_DEVICE):
 * opened once, before the script runs, so every tensor the script makes lands there. */
#include "rank_device.h"

#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "ds_gpu.h"
#include "engine_opts.h"

/* The CUDA ordinal of the rank's GPU: the plan gives each GPU rank one visible device
 * (CUDA_VISIBLE_DEVICES = its slot), which is then ordinal 0; without that, LOCAL_RANK. */
static int cuda_index(const ds_context *ctx) {
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis && !strchr(vis, ',')) return 0;
    return ctx->local_rank;
}

static const char *const KINDS[] = {"auto", "cpu", "cuda", "sim"};

int ds_rank_device_choice(const ds_context *ctx, ds_rank_device *out, ds_err *err) {
    ds_engine_opts o;
    char why[600];
    if (ds_engine_opts_from_env(&o, why, sizeof why) != 0) return ds_err_set(err, "%s", why);
    out->asked = KINDS[o.device];
    out->kind = out->asked;
    out->index = cuda_index(ctx);
    if (!strcmp(out->kind, "auto")) out->kind = ds_gpu_count(NULL, 0) > 0 ? "cuda" : "cpu";
    return 0;
}

int ds_rank_open_device(const ds_context *ctx, ds_err *err) {
    ds_rank_device c;
    if (ds_rank_device_choice(ctx, &c, err) != 0) return -1;
    if (ds_device_open(c.kind, c.index, err) != 0)
        return ds_err_prefix(err, "[engine] device = %s", c.asked);
    return 0;
}

int ds_rank_close_device(ds_err *err) {
    ds_device *d = ds_device_get();
    return d->ops->sync(d, err) == 0 ? 0 : ds_err_prefix(err, "device %s", d->name);
}
