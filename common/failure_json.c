#include "failure_json.h"

/* Long texts keep their head (what went wrong) within the record's budget. */
static void kstr_capped(ds_json *j, const char *key, const char *s, size_t n, size_t cap) {
    if (!s) return;
    ds_json_key(j, key);
    ds_json_strn(j, s, n < cap ? n : cap);
}

void ds_failure_json(ds_json *j, int rank, const char *host, int64_t at_ms, const char *kind, int transport,
                     const char *message, size_t message_len, const char *traceback, size_t traceback_len) {
    ds_json_obj(j);
    ds_json_kint(j, "rank", rank);
    ds_json_kstr(j, "host", host ? host : "");
    ds_json_kint(j, "time_ms", at_ms);
    ds_json_kstr(j, "kind", kind);
    ds_json_kbool(j, "transport", transport);
    kstr_capped(j, "message", message, message_len, DS_FAILURE_MESSAGE_MAX);
    kstr_capped(j, "traceback", traceback, traceback_len, DS_FAILURE_TRACEBACK_MAX);
    ds_json_end(j);
}
