/* Hostfile parser: any input either fails with a message or yields a hostlist whose
 * invariants hold; what parses then goes through the filters, the plan and its JSON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostfile.h"
#include "plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    ds_hostlist hl;
    ds_err err = {""};
    if (ds_hostfile_parse(&hl, "fuzz", text, &err) != 0) {
        if (!strstr(err.msg, "fuzz")) abort(); /* every error names the file */
        free(text);
        return 0;
    }
    if (hl.nhosts <= 0) abort();
    for (int i = 0; i < hl.nhosts; i++) {
        const ds_host *h = &hl.hosts[i];
        if (h->nslots < 1 || h->nkept != h->nslots || !h->name[0]) abort();
        for (int s = 0; s < h->nkept; s++)
            if (h->slots[s] != s) abort();
        for (int k = 0; k < i; k++)
            if (!strcmp(hl.hosts[k].name, h->name)) abort();
    }
    /* the size picks num_nodes / num_gpus, so both paths are reached */
    int nn = (int)(size % 4) - 1, ng = (int)(size / 4 % 4) - 1;
    if (nn == 0) nn = -1;
    if (ng == 0) ng = -1;
    if (ds_hostlist_filter(&hl, NULL, NULL, nn, ng, &err) == 0) {
        ds_plan plan;
        if (ds_plan_build(&plan, &hl, NULL, NULL, 29500, &err) == 0) {
            if (plan.world_size < 1) abort();
            char *js = ds_plan_json(&plan, NULL, NULL, 0, (int)(size & 1));
            if (!js) abort();
            free(js);
            char **env = ds_plan_rank_env(&plan, NULL, plan.world_size - 1, "j", 0);
            if (!env) abort();
            ds_plan_env_free(env);
            ds_plan_free(&plan);
        }
    }
    ds_hostlist_free(&hl);
    free(text);
    return 0;
}
