/* libFuzzer: the JSON reader (common/ds_json_read.c) on arbitrary bytes. A refusal
 * names its byte; what parses stays within the depth limit, and its canonical form (parse
 * + emit, twice: the first round may turn invalid UTF-8 into U+FFFD) is a fixed point, as
 * the checkpoint's engine checksum requires. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ds_json_read.h"

/* v written back, then parsed again (which must succeed); returns the text. */
static char *round_trip(const ds_jv *v, ds_jv **again, size_t *len) {
    ds_json j;
    ds_json_init_buf(&j, 0);
    ds_jv_emit(&j, v);
    if (j.bad) abort();
    ds_err err;
    *again = ds_jv_parse(ds_buf_str(&j.text), j.text.len, &err);
    if (!*again) abort();
    *len = j.text.len;
    return (char *)j.text.data;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ds_err err = {""};
    ds_jv *v = ds_jv_parse((const char *)data, size, &err);
    if (!v) {
        if (strncmp(err.msg, "byte ", 5) != 0) abort();
        return 0;
    }
    if (ds_jv_depth(v) > DS_JV_MAX_DEPTH) abort();
    ds_jv *v1, *v2, *v3;
    size_t n1, n2, n3;
    char *t1 = round_trip(v, &v1, &n1);
    char *t2 = round_trip(v1, &v2, &n2);
    char *t3 = round_trip(v2, &v3, &n3);
    if (n2 != n3 || memcmp(t2, t3, n2) != 0) abort();
    free(t1);
    free(t2);
    free(t3);
    ds_jv_free(v);
    ds_jv_free(v1);
    ds_jv_free(v2);
    ds_jv_free(v3);
    return 0;
}
