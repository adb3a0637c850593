/* The rank's device: opened from the job's [engine] device before the script runs,
 * and waited for at the end so an asynchronous failure is reported, not lost. */
#ifndef DS_RANK_DEVICE_H
#define DS_RANK_DEVICE_H

#include "ds_context.h"
#include "ds_err.h"

typedef struct ds_rank_device {
    const char *asked; /* the job's [engine] device: auto, cpu, cuda or sim */
    const char *kind;  /* what it comes to here: cpu, cuda or sim */
    int index;         /* the CUDA ordinal a cuda rank opens */
} ds_rank_device;

/* What the job asks for and what that means on this node (auto: cuda when the node has
 * a GPU, else cpu), without opening anything. */
int ds_rank_device_choice(const ds_context *ctx, ds_rank_device *out, ds_err *err);
int ds_rank_open_device(const ds_context *ctx, ds_err *err);
int ds_rank_close_device(ds_err *err);

#endif
