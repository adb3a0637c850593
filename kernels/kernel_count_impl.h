/* What the counting table (kernel_count_table.c) and its installer (kernel_count.c)
 * share; nothing else includes it. */
#ifndef DS_KERNEL_COUNT_IMPL_H
#define DS_KERNEL_COUNT_IMPL_H

#include "kernel_count.h"

/* slot: the entry's index in ds_kernel_table (or a DS_KCOUNT_* op) */
void ds_kcount_add(int slot, uint64_t flops, uint64_t bytes_read, uint64_t bytes_written);
/* the table the counting entries call: the device's own, while installed */
const ds_kernel_table *ds_kcount_real(void);

extern const ds_kernel_table ds_kcount_table;
/* the kernel entries' names, by slot */
extern const char *const ds_kcount_kernel_names[];

#endif
