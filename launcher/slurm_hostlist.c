/* slurm_hostlist: see slurm_hostlist.h. An item is cut into its texts and bracket groups,
 * each group is expanded into its numbers (as printed), and the item's names are the
 * combinations, counted like an odometer. */
#include "slurm_hostlist.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 8     /* brackets in one item (Slurm itself knows at most 5 dimensions) */
#define MAX_DIGITS 18    /* a number in a range: fits a long long */
#define MAX_NAME 255     /* the longest host name */

typedef struct group {
    char (*num)[MAX_DIGITS + 1]; /* every number of the bracket, as printed */
    int count;
} group;

typedef struct item {
    const char *text[MAX_GROUPS + 1]; /* text before group i; text[ngroups] is the tail */
    size_t textlen[MAX_GROUPS + 1];
    group g[MAX_GROUPS];
    int ngroups;
} item;

typedef struct expansion {
    const char *expr;
    int max;
    char **names;
    int n, cap;
    ds_err *err;
} expansion;

void ds_slurm_names_free(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static int fail(expansion *x, const char *fmt, const char *what, size_t len) {
    char detail[128];
    snprintf(detail, sizeof detail, fmt, (int)(len > 40 ? 40 : len), what);
    return ds_err_set(x->err, "hostlist '%.200s': %s", x->expr, detail);
}

/* Characters a host name may not contain (the hostfile and filter syntax use them too). */
static int bad_name_char(unsigned char c) {
    return c <= 0x20 || c >= 0x7f || c == '@' || c == '#' || c == '=' || c == ',';
}

static int is_sep(char c) { return c == ',' || isspace((unsigned char)c); }

/* Adds the numbers of one range ("7" or "01-04") to g. */
static int add_range(expansion *x, group *g, const char *r, size_t len) {
    const char *dash = memchr(r, '-', len);
    size_t lolen = dash ? (size_t)(dash - r) : len, hilen = dash ? len - lolen - 1 : lolen;
    const char *hi_s = dash ? dash + 1 : r;
    if (lolen == 0 || hilen == 0 || lolen > MAX_DIGITS || hilen > MAX_DIGITS)
        return fail(x, "'%.*s' is not a range (expected N or N-M)", r, len);
    long long lo = 0, hi = 0;
    for (size_t i = 0; i < lolen; i++) {
        if (!isdigit((unsigned char)r[i])) return fail(x, "'%.*s' is not a range (expected N or N-M)", r, len);
        lo = lo * 10 + (r[i] - '0');
    }
    for (size_t i = 0; i < hilen; i++) {
        if (!isdigit((unsigned char)hi_s[i])) return fail(x, "'%.*s' is not a range (expected N or N-M)", r, len);
        hi = hi * 10 + (hi_s[i] - '0');
    }
    if (hi < lo) return fail(x, "range '%.*s' runs backwards", r, len);
    if (hi - lo >= (long long)x->max - g->count) return fail(x, "'%.*s' names too many hosts", r, len);
    int count = (int)(hi - lo + 1);
    char(*num)[MAX_DIGITS + 1] = realloc(g->num, sizeof *num * (size_t)(g->count + count));
    if (!num) return ds_err_set(x->err, "out of memory");
    g->num = num;
    for (long long v = lo; v <= hi; v++) snprintf(num[g->count++], MAX_DIGITS + 1, "%0*lld", (int)lolen, v);
    return 0;
}

/* Parses the bracket body at *p (just past '['), up to and past its ']'. */
static int parse_group(expansion *x, const char **p, group *g) {
    const char *s = *p;
    for (;;) {
        size_t len = strcspn(s, ",]");
        if (!s[len]) return fail(x, "'[%.*s' has no closing ']'", *p, strlen(*p));
        if (memchr(s, '[', len)) return fail(x, "'[' inside brackets in '[%.*s'", *p, len + (size_t)(s - *p));
        if (add_range(x, g, s, len) != 0) return -1;
        s += len + 1;
        if (s[-1] == ']') break;
    }
    *p = s;
    return 0;
}

static int push_name(expansion *x, const char *name) {
    if (x->n == x->max) return ds_err_set(x->err, "hostlist '%.200s': more than %d hosts", x->expr, x->max);
    if (x->n == x->cap) {
        int cap = x->cap ? 2 * x->cap : 16;
        char **names = realloc(x->names, sizeof *names * (size_t)cap);
        if (!names) return ds_err_set(x->err, "out of memory");
        x->names = names;
        x->cap = cap;
    }
    if (!(x->names[x->n] = strdup(name))) return ds_err_set(x->err, "out of memory");
    x->n++;
    return 0;
}

/* Every combination of the item's groups, the first group varying slowest. */
static int emit(expansion *x, const item *it) {
    int idx[MAX_GROUPS] = {0};
    for (;;) {
        char name[MAX_NAME + 1];
        size_t len = 0;
        for (int gi = 0; gi <= it->ngroups; gi++) {
            const char *num = gi < it->ngroups ? it->g[gi].num[idx[gi]] : "";
            size_t nlen = strlen(num);
            if (len + it->textlen[gi] + nlen > MAX_NAME)
                return ds_err_set(x->err, "hostlist '%.200s': a name longer than %d characters", x->expr, MAX_NAME);
            memcpy(name + len, it->text[gi], it->textlen[gi]);
            len += it->textlen[gi];
            memcpy(name + len, num, nlen);
            len += nlen;
        }
        name[len] = '\0';
        if (push_name(x, name) != 0) return -1;
        int gi = it->ngroups - 1;
        while (gi >= 0 && ++idx[gi] == it->g[gi].count) idx[gi--] = 0;
        if (gi < 0) return 0;
    }
}

/* Parses the item starting at *p (up to a separator outside brackets) and emits it. */
static int parse_item(expansion *x, const char **p) {
    item it = {0};
    const char *s = *p;
    int rc = 0;
    for (;;) {
        const char *t = s;
        while (*s && !is_sep(*s) && *s != '[' && *s != ']') {
            if (bad_name_char((unsigned char)*s)) {
                rc = fail(x, "character '%.*s' is not allowed in a host name", s, 1);
                goto done;
            }
            s++;
        }
        it.text[it.ngroups] = t;
        it.textlen[it.ngroups] = (size_t)(s - t);
        if (*s == ']') {
            rc = fail(x, "']' without '[' in '%.*s'", *p, (size_t)(s - *p) + 1);
            goto done;
        }
        if (*s != '[') break;
        if (it.ngroups == MAX_GROUPS) {
            rc = fail(x, "more than 8 brackets in '%.*s'", *p, strcspn(*p, ", \t\n"));
            goto done;
        }
        s++;
        if ((rc = parse_group(x, &s, &it.g[it.ngroups])) != 0) goto done;
        it.ngroups++;
    }
    if (it.ngroups > 0 && it.textlen[it.ngroups] > 0) {
        rc = fail(x, "text after the last ']' in '%.*s' (Slurm's hostlists allow none)", *p, (size_t)(s - *p));
        goto done;
    }
    long long total = 1;
    for (int gi = 0; gi < it.ngroups; gi++) {
        total *= it.g[gi].count;
        if (total > x->max) {
            rc = fail(x, "'%.*s' names too many hosts", *p, (size_t)(s - *p));
            goto done;
        }
    }
    rc = emit(x, &it);
done:
    for (int gi = 0; gi < MAX_GROUPS; gi++) free(it.g[gi].num);
    *p = s;
    return rc;
}

int ds_slurm_hostlist_expand(const char *expr, int max, char ***names, int *n, ds_err *err) {
    expansion x = {.expr = expr, .max = max, .err = err};
    *names = NULL;
    *n = 0;
    const char *p = expr;
    while (*p) {
        if (is_sep(*p)) {
            p++;
            continue;
        }
        if (parse_item(&x, &p) != 0) {
            ds_slurm_names_free(x.names, x.n);
            return -1;
        }
    }
    if (x.n == 0) return ds_err_set(err, "hostlist '%.200s': no host names", expr);
    *names = x.names;
    *n = x.n;
    return 0;
}
