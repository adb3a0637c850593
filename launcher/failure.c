#include "failure.h"

#include <stdlib.h>
#include <string.h>

#include "ds_json_read.h"

void ds_failure_record_free(ds_failure_record *r) {
    free(r->message);
    free(r->traceback);
    memset(r, 0, sizeof *r);
}

static char *dup_str(const ds_jv *v) {
    return v && v->type == DS_JV_STR ? strndup(v->str, v->len) : NULL;
}

int ds_failure_record_parse(ds_failure_record *r, const void *json, size_t n, ds_err *err) {
    memset(r, 0, sizeof *r);
    ds_jv_limits lim = {.max_depth = 2, .max_values = 64};
    ds_jv *v = ds_jv_parse_limits(json, n, &lim, err);
    if (!v) return ds_err_prefix(err, "failure record");
    const ds_jv *kind = ds_jv_get(v, "kind"), *t = ds_jv_get(v, "time_ms"), *tr = ds_jv_get(v, "transport");
    const ds_jv *msg = ds_jv_get(v, "message");
    if (!kind || kind->type != DS_JV_STR || !ds_jv_is_cstr(kind) || kind->len == 0 ||
        kind->len >= sizeof r->kind || !t || !t->is_int || !msg || msg->type != DS_JV_STR) {
        ds_jv_free(v);
        return ds_err_set(err, "failure record: kind, time_ms or message missing");
    }
    memcpy(r->kind, kind->str, kind->len + 1);
    r->at_ms = t->inum;
    r->transport = tr && tr->type == DS_JV_BOOL && tr->boolean;
    r->message = dup_str(msg);
    r->traceback = dup_str(ds_jv_get(v, "traceback"));
    ds_jv_free(v);
    if (!r->message) {
        ds_failure_record_free(r);
        return ds_err_set(err, "out of memory");
    }
    return 0;
}

/* Earlier first; an unknown time (0) after every known one. */
static int earlier(const ds_failure *a, const ds_failure *b) {
    if (!a->at_ms != !b->at_ms) return a->at_ms != 0;
    return a->at_ms < b->at_ms;
}

int ds_failure_pick_root(const ds_failure *f, int n) {
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) /* causes first, then anything */
        for (int i = 0; i < n; i++) {
            if (pass == 0 && f[i].consequence) continue;
            if (best < 0 || earlier(&f[i], &f[best])) best = i;
        }
    return best;
}
