#include "engine_opts.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ds_engine_opt DS_ENGINE_OPTS[DS_EO_COUNT] = {
#define DS_X(name, key, type, lo, hi, choices, dflt, scope, doc)                                   \
    {#name, key, DS_OPT_##type, (double)(lo), (double)(hi), choices, dflt, DS_OPT_##scope, doc,    \
     offsetof(ds_engine_opts, name)},
    DS_ENGINE_OPTIONS(DS_X)
#undef DS_X
};

const ds_engine_opt *ds_engine_opt_named(const char *name) {
    for (int i = 0; i < DS_EO_COUNT; i++)
        if (!strcmp(DS_ENGINE_OPTS[i].name, name)) return &DS_ENGINE_OPTS[i];
    return NULL;
}

const ds_engine_opt *ds_engine_opt_keyed(const char *key) {
    for (int i = 0; i < DS_EO_COUNT; i++)
        if (!strcmp(DS_ENGINE_OPTS[i].key, key)) return &DS_ENGINE_OPTS[i];
    return NULL;
}

void ds_engine_opts_init(ds_engine_opts *o) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        char why[256];
        /* The table's defaults parse: test_engine_opts checks each one. */
        (void)ds_engine_opt_parse(&DS_ENGINE_OPTS[i], DS_ENGINE_OPTS[i].dflt, o, why, sizeof why);
    }
}

/* The integer bounds of an option as long long (INT64_MAX does not survive a double). */
static long long lo_of(const ds_engine_opt *o) { return (long long)o->lo; }
static long long hi_of(const ds_engine_opt *o) {
    return o->hi >= 9.2e18 ? INT64_MAX : (long long)o->hi;
}

static void expect_values(const ds_engine_opt *o, char *buf, size_t len) {
    switch (o->type) {
    case DS_OPT_INT: snprintf(buf, len, "an integer in %lld..%lld", lo_of(o), hi_of(o)); return;
    case DS_OPT_BYTES:
        snprintf(buf, len, "a size in bytes in %lld..%lld (suffixes KiB, MiB, GiB, TiB, KB, MB, "
                           "GB, TB)", lo_of(o), hi_of(o));
        return;
    case DS_OPT_NUM: snprintf(buf, len, "a number in %g..%g", o->lo, o->hi); return;
    case DS_OPT_CKPT: snprintf(buf, len, "none, full or every:N (N in 1..%lld)", hi_of(o)); return;
    case DS_OPT_ENUM: snprintf(buf, len, "one of %s", o->choices); return;
    }
    snprintf(buf, len, "?");
}

void ds_engine_opt_expect(const ds_engine_opt *o, char *buf, size_t len) {
    expect_values(o, buf, len);
    size_t n = strlen(buf);
    if (ds_engine_opt_takes_auto(o) && n < len) snprintf(buf + n, len - n, ", or auto");
}

static int bad(const ds_engine_opt *o, char *why, size_t len, const char *fmt, const char *what)
    __attribute__((format(printf, 4, 0)));
static int bad(const ds_engine_opt *o, char *why, size_t len, const char *fmt, const char *what) {
    char expect[200];
    ds_engine_opt_expect(o, expect, sizeof expect);
    char head[200];
    snprintf(head, sizeof head, fmt, what);
    snprintf(why, len, "%s; expected %s", head, expect);
    return -1;
}

int ds_engine_opt_check_int(const ds_engine_opt *o, int64_t v, char *why, size_t why_len) {
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)v);
    switch (o->type) {
    case DS_OPT_INT:
    case DS_OPT_BYTES:
        if (v < lo_of(o) || v > hi_of(o)) return bad(o, why, why_len, "%s is out of range", text);
        return 0;
    case DS_OPT_CKPT:
        if (v < 0 || v > hi_of(o)) return bad(o, why, why_len, "%s is out of range", text);
        return 0;
    case DS_OPT_ENUM: {
        int64_t n = 1;
        for (const char *p = o->choices; *p; p++) n += *p == '|';
        if (v < 0 || v >= n) return bad(o, why, why_len, "choice %s does not exist", text);
        return 0;
    }
    case DS_OPT_NUM: return ds_engine_opt_check_num(o, (double)v, why, why_len);
    }
    return bad(o, why, why_len, "%s", "internal: unknown option type");
}

int ds_engine_opt_check_num(const ds_engine_opt *o, double v, char *why, size_t why_len) {
    char text[40];
    snprintf(text, sizeof text, "%.17g", v);
    if (o->type != DS_OPT_NUM) {
        if (v != floor(v) || !isfinite(v) || fabs(v) > 9.2e18)
            return bad(o, why, why_len, "%s is not an integer", text);
        return ds_engine_opt_check_int(o, (int64_t)v, why, why_len);
    }
    if (!isfinite(v) || v < o->lo || v > o->hi) return bad(o, why, why_len, "%s is out of range", text);
    return 0;
}

/* An integer written as digits, or as a number with an exponent or a fraction that is
 * integral ("5e8", as DeepSpeed configs write bucket sizes). 0, -1 not an integer, -2
 * beyond int64. */
static int parse_integer(const char *s, int64_t *out) {
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*end) {
        if (errno == ERANGE) return -2;
        *out = v;
        return 0;
    }
    double d = strtod(s, &end);
    if (*end || !isfinite(d) || d != floor(d)) return -1;
    if (fabs(d) >= 9.2e18) return -2;
    *out = (int64_t)d;
    return 0;
}

static int parse_bytes(const char *s, int64_t *out) {
    static const struct { const char *suffix; double scale; } UNITS[] = {
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
        {"B", 1.0},      {"", 1.0}};
    if (!*s || isspace((unsigned char)*s)) return -1;
    char *end;
    double d = strtod(s, &end);
    if (end == s || !isfinite(d) || d < 0) return -1;
    while (*end == ' ') end++;
    for (size_t i = 0; i < sizeof UNITS / sizeof UNITS[0]; i++) {
        if (strcmp(end, UNITS[i].suffix)) continue;
        double b = d * UNITS[i].scale;
        if (b != floor(b)) return -1; /* a fraction of a byte */
        if (b >= 9.2e18) return -2;
        *out = (int64_t)b;
        return 0;
    }
    return -1;
}

static int parse_ckpt(const ds_engine_opt *o, const char *s, int64_t *out, char *why, size_t len) {
    if (!strcmp(s, "none")) return *out = 0, 0;
    if (!strcmp(s, "full")) return *out = 1, 0;
    int64_t n;
    const char *num = strncmp(s, "every:", 6) ? s : s + 6;
    if (parse_integer(num, &n) != 0 || n < 1)
        return bad(o, why, len, "'%s' is not a checkpointing choice", s);
    if (n > hi_of(o)) return bad(o, why, len, "'%s' is out of range", s);
    *out = n;
    return 0;
}

int ds_engine_opt_parse(const ds_engine_opt *o, const char *text, ds_engine_opts *out, char *why,
                        size_t why_len) {
    int64_t v = 0;
    int rc;
    if (ds_engine_opt_takes_auto(o) && !strcmp(text, "auto"))
        return *ds_engine_opt_int(o, out) = DS_ENGINE_AUTO, 0;
    switch (o->type) {
    case DS_OPT_INT:
        rc = parse_integer(text, &v);
        if (rc == -1) return bad(o, why, why_len, "'%s' is not an integer", text);
        if (rc == -2) return bad(o, why, why_len, "%s is out of range", text);
        if (ds_engine_opt_check_int(o, v, why, why_len) != 0) return -1;
        *ds_engine_opt_int(o, out) = v;
        return 0;
    case DS_OPT_BYTES:
        rc = parse_bytes(text, &v);
        if (rc == -1) return bad(o, why, why_len, "'%s' is not a size in bytes", text);
        if (rc == -2) return bad(o, why, why_len, "%s is out of range", text);
        if (ds_engine_opt_check_int(o, v, why, why_len) != 0) return -1;
        *ds_engine_opt_int(o, out) = v;
        return 0;
    case DS_OPT_ENUM: {
        size_t n = strlen(text);
        int64_t idx = 0;
        for (const char *p = o->choices;; idx++) {
            size_t l = strcspn(p, "|");
            if (l == n && !strncmp(p, text, n)) return *ds_engine_opt_int(o, out) = idx, 0;
            if (!p[l]) break;
            p += l + 1;
        }
        return bad(o, why, why_len, "'%s' is not a choice", text);
    }
    case DS_OPT_CKPT:
        if (parse_ckpt(o, text, &v, why, why_len) != 0) return -1;
        *ds_engine_opt_int(o, out) = v;
        return 0;
    case DS_OPT_NUM: {
        char *end;
        double d = strtod(text, &end);
        if (!*text || *end || isspace((unsigned char)*text))
            return bad(o, why, why_len, "'%s' is not a number", text);
        if (ds_engine_opt_check_num(o, d, why, why_len) != 0) return -1;
        *ds_engine_opt_num(o, out) = d;
        return 0;
    }
    }
    return bad(o, why, why_len, "%s", "internal: unknown option type");
}

void ds_engine_opt_format(const ds_engine_opt *o, const ds_engine_opts *v, char *buf, size_t len) {
    ds_engine_opts *vv = (ds_engine_opts *)v; /* the accessors are shared with writers */
    int64_t i = o->type == DS_OPT_NUM ? 0 : *ds_engine_opt_int(o, vv);
    if (ds_engine_opt_takes_auto(o) && i == DS_ENGINE_AUTO) {
        snprintf(buf, len, "auto");
        return;
    }
    switch (o->type) {
    case DS_OPT_INT:
    case DS_OPT_BYTES: snprintf(buf, len, "%lld", (long long)i); return;
    case DS_OPT_NUM: { /* the shortest text that reads back the same: 0.1, not 0.10000000000000001 */
        double d = *ds_engine_opt_num(o, vv);
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, len, "%.*g", digits, d);
            if (strtod(buf, NULL) == d) break;
        }
        return;
    }
    case DS_OPT_CKPT:
        if (i == 0) snprintf(buf, len, "none");
        else if (i == 1) snprintf(buf, len, "full");
        else snprintf(buf, len, "every:%lld", (long long)i);
        return;
    case DS_OPT_ENUM: {
        const char *p = o->choices;
        for (int64_t k = 0; k < i && strchr(p, '|'); k++) p = strchr(p, '|') + 1;
        snprintf(buf, len, "%.*s", (int)strcspn(p, "|"), p);
        return;
    }
    }
    snprintf(buf, len, "?");
}

int ds_engine_opts_check(const ds_engine_opts *v, const ds_engine_opt **a, const ds_engine_opt **b,
                         char *why, size_t why_len) {
    if (v->initial_scale_power < 31 && v->min_loss_scale > (int64_t)1 << v->initial_scale_power) {
        *a = &DS_ENGINE_OPTS[DS_EO_initial_scale_power];
        *b = &DS_ENGINE_OPTS[DS_EO_min_loss_scale];
        snprintf(why, why_len, "min_loss_scale (%lld) is above the initial scale 2^%lld",
                 (long long)v->min_loss_scale, (long long)v->initial_scale_power);
        return -1;
    }
    return 0;
}

void ds_engine_opt_env_name(const ds_engine_opt *o, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "DS_ENGINE_");
    for (const char *p = o->name; *p && n + 1 < len; p++) buf[n++] = (char)toupper((unsigned char)*p);
    buf[n < len ? n : len - 1] = '\0';
}

int ds_engine_opts_from_env(ds_engine_opts *out, char *why, size_t why_len) {
    ds_engine_opts_init(out);
    for (int i = 0; i < DS_EO_COUNT; i++) {
        const ds_engine_opt *o = &DS_ENGINE_OPTS[i];
        char name[64], msg[400];
        ds_engine_opt_env_name(o, name, sizeof name);
        const char *v = getenv(name);
        if (!v || !*v) continue;
        if (ds_engine_opt_parse(o, v, out, msg, sizeof msg) != 0) {
            snprintf(why, why_len, "environment %s=%s: %s", name, v, msg);
            return -1;
        }
    }
    const ds_engine_opt *a, *b;
    char msg[400];
    if (ds_engine_opts_check(out, &a, &b, msg, sizeof msg) != 0) {
        snprintf(why, why_len, "environment DS_ENGINE_*: %s", msg);
        return -1;
    }
    return 0;
}
