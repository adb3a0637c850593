/* Slurm's hostlist expressions, as in SLURM_JOB_NODELIST: `n[01-04,07],gpu-a[1-2]`.
 *
 * The grammar, as Slurm 22.05's `scontrol show hostnames` reads it (the unit tests use
 * that command as the oracle):
 *   list   = item { sep item }        sep: ',' or blanks outside brackets; empty items
 *                                     are skipped
 *   item   = text { '[' ranges ']' text }   no text may follow the last ']'
 *   ranges = range { ',' range }      range: N or N-M with N <= M, decimal digits
 * Each bracket is a set of numbers, each printed with as many digits as the range's first
 * number was written with (`[08-10]` gives 08 09 10, `[8-10]` gives 8 9 10). Several
 * brackets in one item give every combination, the first bracket varying slowest
 * (`r[1-2]n[1-2]` gives r1n1 r1n2 r2n1 r2n2). Order and duplicates are kept.
 * Where Slurm reads malformed input as some list of names anyway (`n[1-`, `n]1`,
 * `n[ 1-2]`), this parser says what is wrong instead. */
#ifndef DS_SLURM_HOSTLIST_H
#define DS_SLURM_HOSTLIST_H

#include "ds_err.h"

/* Expands expr into *names (malloc'd array of *n malloc'd strings; free with
 * ds_slurm_names_free). At most max names: more is an error, so a typo such as
 * n[1-1000000000] cannot exhaust memory. Returns 0, or -1 with err naming the
 * expression and what is wrong. */
int ds_slurm_hostlist_expand(const char *expr, int max, char ***names, int *n, ds_err *err);
void ds_slurm_names_free(char **names, int n);

#endif
