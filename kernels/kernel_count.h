/* Counting what a device is asked to do: a kernel table whose every entry records, per
 * entry, its calls, FLOPs and the bytes it must read and write, then calls the device's
 * own entry; and the device's memory ops that move bytes on it (memset0, the zeroing of
 * fresh allocations, device-to-device copies, host<->device copies), with the
 * allocations not zeroed (alloc_uninit) counted as calls that move nothing. Installed over the
 * process's device (device.h) it replaces d->k and d->ops; uninstalled, both are the
 * device's again and nothing is counted (no cost when not installed).
 *
 * What is counted is the least a kernel must move, not what a backend's kernel does:
 * each operand read once, each output written once, a += output read and written, at
 * fp32 4 bytes, bf16/fp16 2, int32 4 per element; a device's workspaces (fp32 images of
 * 16-bit operands on cpu and sim, rounded copies on cuda) are not counted. GEMM FLOPs
 * are 2 per multiply-add (the bias epilogue's adds left out, as the MFU model does),
 * attention's the causal kernels' (only the scores at or below the diagonal), the fused
 * backward recomputing the scores. Elementwise FLOPs are nominal per-element counts
 * (each formula says which): such kernels are bandwidth-bound on any GPU. It is what a
 * roofline lower bound of the step time needs (bench/gpu/step_traffic.lua,
 * docs/gpu.md). A call is counted when the engine makes it (sim: when it is queued). */
#ifndef DS_KERNEL_COUNT_H
#define DS_KERNEL_COUNT_H

#include <stdint.h>

#include "device.h"

/* The table's entries, one slot each (in struct order), then the device ops counted. */
#define DS_KCOUNT_NKERNELS ((int)(sizeof(ds_kernel_table) / sizeof(void (*)(void))))
enum {
    DS_KCOUNT_MEMSET0 = DS_KCOUNT_NKERNELS, /* ops->memset0: bytes written */
    DS_KCOUNT_ALLOC_ZERO,                   /* ops->alloc: a fresh buffer zeroed, bytes written */
    DS_KCOUNT_ALLOC_UNINIT,                 /* ops->alloc_uninit: calls only, nothing moved */
    DS_KCOUNT_COPY,                         /* ops->copy, device to device: read + written */
    DS_KCOUNT_TO_HOST,                      /* ops->to_host: device bytes read */
    DS_KCOUNT_FROM_HOST,                    /* ops->from_host: device bytes written */
    DS_KCOUNT_N
};

typedef struct ds_kcount {
    uint64_t calls, flops, bytes_read, bytes_written;
} ds_kcount;

/* Counts d's kernels and memory ops from now on, from zero. -1 with err when a count is
 * already installed (over any device). */
int ds_kernel_count_install(ds_device *d, ds_err *err);
/* Gives d its own table and ops back; the counts stay readable. No-op when none. */
void ds_kernel_count_uninstall(void);
int ds_kernel_count_installed(void);
void ds_kernel_count_reset(void);
/* Slot i's name (a kernel_table.h field name, or memset0, alloc_zero, alloc_uninit, copy,
 * to_host, from_host) and counts, 0 <= i < DS_KCOUNT_N. */
const char *ds_kernel_count_name(int i);
ds_kcount ds_kernel_count_get(int i);
/* Slot i's calls by distinct per-call cost, in the order first seen: out[k] sums the
 * calls whose FLOPs and bytes are all equal (calls times one call's), except the last
 * of DS_KCOUNT_COSTS, which sums every call beyond the others (its costs mixed).
 * Returns how many of out it filled. */
enum { DS_KCOUNT_COSTS = 32 };
int ds_kernel_count_costs(int i, ds_kcount out[DS_KCOUNT_COSTS]);
/* The counting table itself (what install puts in d->k), for tests. */
const ds_kernel_table *ds_kernel_count_table(void);

#endif
