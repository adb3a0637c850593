/* The INI job spec: any input either fails with "NAME:..." or yields a spec whose
 * invariants hold (required keys set, workdir absolute, args NULL-terminated). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    ds_jobspec spec;
    ds_err err = {""};
    if (ds_jobspec_parse(&spec, "/fuzz/job.ini", text, &err) != 0) {
        if (strncmp(err.msg, "/fuzz/job.ini", 13) != 0) abort();
        free(text);
        return 0;
    }
    if (!spec.name || !spec.script || !spec.workdir || spec.workdir[0] != '/') abort();
    if (spec.nargs < 0 || spec.args[spec.nargs] != NULL) abort();
    for (int i = 0; i < spec.nargs; i++)
        if (!spec.args[i]) abort();
    if (ds_tee_check(spec.tee, &err) != 0) abort();
    for (int r = 0; r < 8; r++) (void)ds_tee_selects(spec.tee, r);
    if (spec.zero_stage < 0 || spec.zero_stage > 3 || spec.micro_batch < 1) abort();
    if (spec.heartbeat_timeout_ms <= spec.heartbeat_interval_ms) abort();
    for (int i = 0; i < spec.nenv; i++)
        if (ds_env_reserved(spec.env[i].key)) abort();
    ds_jobspec_free(&spec);
    free(text);
    return 0;
}
