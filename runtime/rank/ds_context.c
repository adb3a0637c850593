#include "ds_context.h"

#include <string.h>

#include "ds_hostname.h"

void ds_context_single(ds_context *ctx) {
    memset(ctx, 0, sizeof *ctx);
    ctx->world_size = 1;
    ctx->local_world_size = 1;
    ds_hostname(ctx->host, sizeof ctx->host, "localhost");
    strcpy(ctx->job_id, "local");
}
