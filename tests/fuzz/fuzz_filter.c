/* --include / --exclude strings on a fixed hostfile. The first byte picks include,
 * exclude or both; a successful filter keeps ascending subsets and at least one slot. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfile.h"

static const char *HOSTS = "a slots=4\nb slots=2\n::1 slots=3\nfe80::2 slots=2\nc slots=1 spare\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    int mode = data[0] % 3;
    char *spec = malloc(size);
    memcpy(spec, data + 1, size - 1);
    spec[size - 1] = '\0';
    ds_hostlist hl;
    ds_err err;
    if (ds_hostfile_parse(&hl, "hosts", HOSTS, &err) != 0) abort();
    int rc = ds_hostlist_filter(&hl, mode != 1 ? spec : NULL, mode != 0 ? spec : NULL, -1, -1, &err);
    if (mode == 2 && spec[0] && rc == 0) abort(); /* include and exclude together */
    if (rc == 0) {
        int world = 0;
        for (int i = 0; i < hl.nhosts; i++) {
            const ds_host *h = &hl.hosts[i];
            if (h->nkept < 1 || h->nkept > h->nslots) abort();
            for (int s = 1; s < h->nkept; s++)
                if (h->slots[s] <= h->slots[s - 1]) abort();
            world += !h->spare;
        }
        if (world < 1) abort();
    }
    ds_hostlist_free(&hl);
    free(spec);
    return 0;
}
