/* hostfile: see hostfile.h and docs/hostfile.md. The language is DeepSpeed's
 * (`^(\S+)\s+slots=(\d+)` per line, `#` comments); where DeepSpeed silently accepts
 * something that is almost certainly a mistake, this parser says so. */
#include "ds_textfile.h"
#include "hostfile.h"

#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sanity bounds: a line naming more slots than this is a typo, not a machine. */
#define DS_MAX_SLOTS 4096
#define DS_MAX_HOSTNAME 255

static char *xstrndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void ds_hostlist_free(ds_hostlist *hl) {
    if (!hl) return;
    for (int i = 0; i < hl->nhosts; i++) {
        free(hl->hosts[i].name);
        free(hl->hosts[i].slots);
    }
    free(hl->hosts);
    hl->hosts = NULL;
    hl->nhosts = 0;
}

/* Appends a host with slots 0..nslots-1 kept. */
static int add_host(ds_hostlist *hl, const char *name, size_t namelen, int nslots, int spare,
                    int line, ds_err *err) {
    ds_host *nh = realloc(hl->hosts, (size_t)(hl->nhosts + 1) * sizeof *nh);
    if (!nh) return ds_err_set(err, "out of memory");
    hl->hosts = nh;
    ds_host *h = &hl->hosts[hl->nhosts];
    memset(h, 0, sizeof *h);
    h->name = xstrndup(name, namelen);
    h->slots = malloc((size_t)nslots * sizeof *h->slots);
    if (!h->name || !h->slots) {
        free(h->name);
        free(h->slots);
        return ds_err_set(err, "out of memory");
    }
    for (int s = 0; s < nslots; s++) h->slots[s] = s;
    h->nslots = h->nkept = nslots;
    h->spare = spare;
    h->line = line;
    hl->nhosts++;
    return 0;
}

static int find_host(const ds_hostlist *hl, const char *name, size_t len) {
    for (int i = 0; i < hl->nhosts; i++)
        if (strlen(hl->hosts[i].name) == len && !memcmp(hl->hosts[i].name, name, len)) return i;
    return -1;
}

/* Parses a non-negative decimal made of digits only (no sign, no spaces) below limit.
 * Returns the value, -1 when s is not all digits, -2 when it is too large. */
static long parse_count(const char *s, size_t n, long limit) {
    if (n == 0) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        if (v > limit) continue; /* keep scanning: a non-digit later is the better error */
        v = v * 10 + (s[i] - '0');
    }
    return v > limit ? -2 : v;
}

/* A host name is printable ASCII without the characters the hostfile and the filter
 * syntax use as separators. */
static const char *bad_name_char(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '@' || c == ',' || c == '#' || c == '=')
            return s + i;
    }
    return NULL;
}

/* The next whitespace-separated token of [*p, end); returns its length (0 at the end). */
static size_t next_token(const char **p, const char *end, const char **tok) {
    const char *s = *p;
    while (s < end && isspace((unsigned char)*s)) s++;
    *tok = s;
    while (s < end && !isspace((unsigned char)*s)) s++;
    *p = s;
    return (size_t)(s - *tok);
}

static int parse_line(ds_hostlist *hl, const char *name, int lineno, const char *line,
                      const char *end, ds_err *err) {
    /* `#` starts a comment at the start of a line or after whitespace */
    for (const char *c = line; c < end; c++)
        if (*c == '#' && (c == line || isspace((unsigned char)c[-1]))) {
            end = c;
            break;
        }
    for (const char *c = line; c < end; c++)
        if (*c == '\0') return ds_err_set(err, "%s:%d: NUL byte in the hostfile", name, lineno);

    const char *p = line, *host, *slots, *extra;
    size_t hostlen = next_token(&p, end, &host);
    if (hostlen == 0) return 0; /* blank or comment */
    size_t slotslen = next_token(&p, end, &slots);
    if (slotslen == 0)
        return ds_err_set(err, "%s:%d: '%.*s': expected `HOST slots=N` (the slot count is required)",
                          name, lineno, (int)(hostlen > 200 ? 200 : hostlen), host);
    if (hostlen > DS_MAX_HOSTNAME)
        return ds_err_set(err, "%s:%d: host name longer than %d characters", name, lineno,
                          DS_MAX_HOSTNAME);
    const char *bad = bad_name_char(host, hostlen);
    if (bad)
        return ds_err_set(err, "%s:%d: host '%.*s': character 0x%02x is not allowed in a host name",
                          name, lineno, (int)hostlen, host, (unsigned char)*bad);
    if (slotslen < 6 || strncmp(slots, "slots=", 6) != 0)
        return ds_err_set(err, "%s:%d: '%.*s': expected slots=N after the host name", name, lineno,
                          (int)(slotslen > 200 ? 200 : slotslen), slots);
    const char *num = slots + 6;
    size_t numlen = slotslen - 6, digits = 0;
    while (digits < numlen && isdigit((unsigned char)num[digits])) digits++;
    if (digits == 0)
        return ds_err_set(err, "%s:%d: '%.*s': expected slots=N with N a positive integer", name,
                          lineno, (int)(slotslen > 200 ? 200 : slotslen), slots);
    if (digits < numlen)
        return ds_err_set(err,
                          "%s:%d: '%.*s': trailing text after the slot count (DeepSpeed would "
                          "silently read slots=%.*s)",
                          name, lineno, (int)(slotslen > 200 ? 200 : slotslen), slots, (int)digits,
                          num);
    long n = parse_count(num, digits, DS_MAX_SLOTS);
    if (n == 0)
        return ds_err_set(err, "%s:%d: host '%.*s': slots=0: a host needs at least one slot "
                               "(comment the line out to skip the host)",
                          name, lineno, (int)hostlen, host);
    if (n < 0)
        return ds_err_set(err, "%s:%d: host '%.*s': slots=%.*s: more than %d slots", name, lineno,
                          (int)hostlen, host, (int)digits, num, DS_MAX_SLOTS);
    int spare = 0;
    size_t extralen;
    while ((extralen = next_token(&p, end, &extra)) > 0) {
        if (extralen == 5 && !memcmp(extra, "spare", 5) && !spare) {
            spare = 1;
            continue;
        }
        return ds_err_set(err, "%s:%d: unexpected '%.*s' after slots=%ld (only `spare` may follow)",
                          name, lineno, (int)(extralen > 200 ? 200 : extralen), extra, n);
    }
    int dup = find_host(hl, host, hostlen);
    if (dup >= 0)
        return ds_err_set(err, "%s:%d: host '%.*s' is listed twice (first on line %d)", name,
                          lineno, (int)hostlen, host, hl->hosts[dup].line);
    return add_host(hl, host, hostlen, (int)n, spare, lineno, err);
}

int ds_hostfile_parse(ds_hostlist *out, const char *name, const char *text, ds_err *err) {
    memset(out, 0, sizeof *out);
    int lineno = 0;
    const char *p = text;
    if (!strncmp(p, "\xEF\xBB\xBF", 3)) p += 3; /* a UTF-8 byte order mark, as editors write it */
    while (*p) {
        const char *eol = strchr(p, '\n');
        const char *end = eol ? eol : p + strlen(p);
        lineno++;
        if (lineno == INT_MAX) break;
        if (parse_line(out, name, lineno, p, end, err) != 0) {
            ds_hostlist_free(out);
            return -1;
        }
        p = eol ? eol + 1 : end;
    }
    if (out->nhosts == 0)
        return ds_err_set(err, "%s: no hosts: the hostfile is empty or has only comments", name);
    return 0;
}

int ds_hostfile_load(ds_hostlist *out, const char *path, ds_err *err) {
    memset(out, 0, sizeof *out);
    char *buf = ds_textfile_read(path, "the hostfile", 64u << 20, err);
    if (!buf) return -1;
    int rc = ds_hostfile_parse(out, path, buf, err);
    free(buf);
    return rc;
}

int ds_hostlist_local(ds_hostlist *out, int ngpus_found, int num_gpus, ds_err *err) {
    memset(out, 0, sizeof *out);
    if (num_gpus == 0 || num_gpus < -1)
        return ds_err_set(err, "num_gpus %d: expected a positive number of slots", num_gpus);
    int n = ngpus_found > 0 ? ngpus_found : num_gpus > 0 ? num_gpus : 1;
    if (n > DS_MAX_SLOTS) return ds_err_set(err, "num_gpus %d: more than %d slots", n, DS_MAX_SLOTS);
    if (add_host(out, "localhost", 9, n, 0, 0, err) != 0) return -1;
    /* The CUDA runtime counts only the devices CUDA_VISIBLE_DEVICES lets through, but a
     * rank's own CUDA_VISIBLE_DEVICES must name physical devices: the slots are the
     * listed indices (DeepSpeed turns the variable into --include localhost:LIST). */
    const char *mask = getenv("CUDA_VISIBLE_DEVICES");
    if (ngpus_found <= 0 || !mask || !*mask) return 0;
    ds_host *h = &out->hosts[0];
    int k = 0, maxslot = -1;
    const char *p = mask;
    while (*p && k < ngpus_found) {
        size_t len = strcspn(p, ",");
        long v = parse_count(p, len, DS_MAX_SLOTS - 1);
        if (v < 0) {
            ds_hostlist_free(out);
            return ds_err_set(err, "CUDA_VISIBLE_DEVICES=%s: '%.*s' is not a device index "
                                   "(UUIDs and MIG names are not supported)",
                              mask, (int)len, p);
        }
        for (int i = 0; i < k; i++)
            if (h->slots[i] == v) {
                ds_hostlist_free(out);
                return ds_err_set(err, "CUDA_VISIBLE_DEVICES=%s: device %ld is listed twice",
                                  mask, v);
            }
        h->slots[k++] = (int)v;
        if (v > maxslot) maxslot = (int)v;
        p += len;
        if (*p == ',') p++;
    }
    /* the kept slots must stay ascending for the filters: sort the few entries */
    for (int i = 1; i < k; i++)
        for (int m = i; m > 0 && h->slots[m - 1] > h->slots[m]; m--) {
            int t = h->slots[m];
            h->slots[m] = h->slots[m - 1];
            h->slots[m - 1] = t;
        }
    h->nkept = k;
    h->nslots = maxslot + 1;
    return 0;
}

int ds_filter_max_slot(const char *filter, const char *host) {
    int max = -1;
    size_t hlen = strlen(host);
    for (const char *p = filter; p && *p;) {
        size_t n = strcspn(p, "@");
        if (n > hlen && !strncmp(p, host, hlen) && p[hlen] == ':') {
            for (const char *q = p + hlen + 1; q < p + n;) {
                size_t m = strcspn(q, ",@");
                long s = parse_count(q, m, DS_MAX_SLOTS);
                if (s > max) max = (int)s;
                q += m + (q[m] == ',');
            }
        }
        p += n + (p[n] == '@');
    }
    return max;
}

/* ---- filters ---- */

/* What a filter string says about each host: whole host, or a set of slots. */
typedef struct pick {
    int whole;
    unsigned char *slot; /* slot[s] = 1 when named; sized nslots */
    int named;
} pick;

static int kept_has(const ds_host *h, long s) {
    for (int i = 0; i < h->nkept; i++)
        if (h->slots[i] == s) return 1;
    return 0;
}

static void kept_list(const ds_host *h, char *buf, size_t cap) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < h->nkept && len + 16 < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", h->slots[i]);
    if (h->nkept && len + 16 >= cap) snprintf(buf + len, cap - len, ",...");
}

/* Parses one NODE_SPEC = NAME[:SLOT[,SLOT...]] into picks. */
static int parse_node_spec(const ds_hostlist *hl, pick *picks, const char *what, const char *spec,
                           size_t len, ds_err *err) {
    if (len == 0)
        return ds_err_set(err, "%s '%s': empty host between '@' separators", what, spec);
    /* A whole host name wins over NAME:SLOTS, so IPv6 names such as ::1 work bare;
     * otherwise the slot list starts after the last ':'. */
    int hi = find_host(hl, spec, len);
    if (hi >= 0) {
        picks[hi].whole = 1;
        picks[hi].named = 1;
        return 0;
    }
    const char *colon = NULL;
    for (size_t i = 0; i < len; i++)
        if (spec[i] == ':') colon = spec + i;
    size_t namelen = colon ? (size_t)(colon - spec) : len;
    hi = find_host(hl, spec, namelen);
    if (hi < 0)
        return ds_err_set(err, "%s: host '%.*s' is not in the hostfile", what,
                          (int)(namelen > 256 ? 256 : namelen), spec);
    const ds_host *h = &hl->hosts[hi];
    const char *p = colon + 1, *end = spec + len;
    if (p == end)
        return ds_err_set(err, "%s '%.*s': empty slot list after ':'", what, (int)len, spec);
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t n = comma ? (size_t)(comma - p) : (size_t)(end - p);
        long s = parse_count(p, n, INT_MAX);
        if (s == -1)
            return ds_err_set(err, "%s '%.*s': '%.*s' is not a slot index (expected a "
                                   "non-negative integer)",
                              what, (int)len, spec, (int)(n > 64 ? 64 : n), p);
        if (s < 0 || !kept_has(h, s)) {
            char avail[128];
            kept_list(h, avail, sizeof avail);
            return ds_err_set(err, "%s: no slot '%.*s' on host '%s' (it has slots %s)", what,
                              (int)(n > 64 ? 64 : n), p, h->name, avail);
        }
        picks[hi].slot[s] = 1;
        picks[hi].named = 1;
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

/* Keeps, on every host, the slots for which keep(pick, slot) says so. */
static void apply_picks(ds_hostlist *hl, const pick *picks, int include) {
    for (int i = 0; i < hl->nhosts; i++) {
        ds_host *h = &hl->hosts[i];
        const pick *pk = &picks[i];
        int k = 0;
        for (int j = 0; j < h->nkept; j++) {
            int s = h->slots[j];
            int named = pk->whole || (pk->named && pk->slot[s]);
            if (include ? named : !named) h->slots[k++] = s;
        }
        h->nkept = k;
    }
}

static int filter_by_spec(ds_hostlist *hl, const char *spec, int include, ds_err *err) {
    const char *what = include ? "--include" : "--exclude";
    pick *picks = calloc((size_t)hl->nhosts, sizeof *picks);
    int rc = picks ? 0 : ds_err_set(err, "out of memory");
    for (int i = 0; rc == 0 && i < hl->nhosts; i++) {
        picks[i].slot = calloc((size_t)hl->hosts[i].nslots + 1, 1);
        if (!picks[i].slot) rc = ds_err_set(err, "out of memory");
    }
    const char *p = spec;
    while (rc == 0) {
        size_t n = strcspn(p, "@");
        rc = parse_node_spec(hl, picks, what, p, n, err);
        if (p[n] != '@') break;
        p += n + 1;
    }
    if (rc == 0) apply_picks(hl, picks, include);
    for (int i = 0; picks && i < hl->nhosts; i++) free(picks[i].slot);
    free(picks);
    return rc;
}

static void drop_empty_hosts(ds_hostlist *hl) {
    int k = 0;
    for (int i = 0; i < hl->nhosts; i++) {
        if (hl->hosts[i].nkept > 0) {
            hl->hosts[k++] = hl->hosts[i];
        } else {
            free(hl->hosts[i].name);
            free(hl->hosts[i].slots);
        }
    }
    hl->nhosts = k;
}

int ds_hostlist_filter(ds_hostlist *hl, const char *include, const char *exclude, int num_nodes,
                       int num_gpus, ds_err *err) {
    if (include && !*include) include = NULL;
    if (exclude && !*exclude) exclude = NULL;
    if (include && exclude)
        return ds_err_set(err, "--include and --exclude are mutually exclusive (give one)");
    if ((num_nodes != -1 || num_gpus != -1) && (include || exclude))
        return ds_err_set(err, "--num_nodes/--num_gpus cannot be combined with --include/--exclude");
    if (num_nodes == 0 || num_nodes < -1)
        return ds_err_set(err, "--num_nodes %d: expected a positive number of nodes", num_nodes);
    if (num_gpus == 0 || num_gpus < -1)
        return ds_err_set(err, "--num_gpus %d: expected a positive number of slots", num_gpus);

    if (include && filter_by_spec(hl, include, 1, err) != 0) return -1;
    if (exclude && filter_by_spec(hl, exclude, 0, err) != 0) return -1;

    if (num_nodes > 0) {
        int avail = 0;
        for (int i = 0; i < hl->nhosts; i++) avail += !hl->hosts[i].spare;
        if (num_nodes > avail)
            return ds_err_set(err, "--num_nodes %d: only %d node%s available", num_nodes, avail,
                              avail == 1 ? "" : "s");
        int seen = 0;
        for (int i = 0; i < hl->nhosts; i++) {
            ds_host *h = &hl->hosts[i];
            if (h->spare) continue;
            if (++seen > num_nodes) h->nkept = 0;
        }
    }
    if (num_gpus > 0) {
        for (int i = 0; i < hl->nhosts; i++) {
            ds_host *h = &hl->hosts[i];
            if (h->nkept == 0) continue;
            if (h->nkept < num_gpus)
                return ds_err_set(err, "--num_gpus %d: host '%s' has only %d slot%s", num_gpus,
                                  h->name, h->nkept, h->nkept == 1 ? "" : "s");
            h->nkept = num_gpus; /* the first N, as DeepSpeed's range(num_gpus) */
        }
    }
    drop_empty_hosts(hl);
    int world = 0;
    for (int i = 0; i < hl->nhosts; i++) world += !hl->hosts[i].spare;
    if (world == 0) {
        if (include) return ds_err_set(err, "--include %s leaves no slot to run on", include);
        if (exclude) return ds_err_set(err, "--exclude %s leaves no slot to run on", exclude);
        return ds_err_set(err, "no slot to run on: every host is a spare");
    }
    return 0;
}
