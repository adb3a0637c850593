/* ssh_config: see ssh_config.h. The file is kept as a list of blocks (the lines before
 * the first Host, then one per Host or Match line), each with its condition as written
 * and its options; a lookup walks them in order as ssh does. */
#include "ssh_config.h"

#include <ctype.h>
#include <glob.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ds_buf.h"
#include "ds_textfile.h"
#include "jobspec.h"

#define MAX_INCLUDE_DEPTH 16

enum { K_HOSTNAME, K_USER, K_PORT, K_IDENTITYFILE, K_IDENTITIESONLY, K_PROXYJUMP,
       K_STRICT, K_KNOWNHOSTS, K_CONNECTTIMEOUT, K_ALIVE, K_REFUSED, K_IGNORED };

/* The keywords that change where or how the connection goes, which dslaunch does not do:
 * a host they apply to is refused rather than reached some other way. */
static const char *const REFUSED[] = {"proxycommand", "hostkeyalias", "canonicalizehostname",
                                      "proxyusefdpass", "remotecommand", "localforward",
                                      "remoteforward", "dynamicforward"};

static const struct {
    const char *name;
    int kw;
} KEYWORDS[] = {
    {"hostname", K_HOSTNAME},         {"user", K_USER},
    {"port", K_PORT},                 {"identityfile", K_IDENTITYFILE},
    {"identitiesonly", K_IDENTITIESONLY}, {"proxyjump", K_PROXYJUMP},
    {"stricthostkeychecking", K_STRICT}, {"userknownhostsfile", K_KNOWNHOSTS},
    {"connecttimeout", K_CONNECTTIMEOUT}, {"serveraliveinterval", K_ALIVE},
};

typedef struct opt {
    int kw;
    char *name; /* as written, for messages */
    char *arg;
    char where[280];
} opt;

typedef struct block {
    int is_match;
    char *cond; /* Host patterns or Match criteria, as written; NULL: every host */
    char where[280];
    opt *opts;
    int nopts;
} block;

struct ds_ssh_config {
    block *b;
    int nb;
    ds_buf warnings;
};

/* ---- parsing ---- */

typedef struct parser {
    ds_ssh_config *c;
    ds_err *err;
    int depth;
} parser;

static const char *home(void) {
    const char *h = getenv("HOME");
    if (h && *h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_dir : "/";
}

static int add_block(ds_ssh_config *c, int is_match, const char *cond, const char *where) {
    block *nb = realloc(c->b, (size_t)(c->nb + 1) * sizeof *nb);
    if (!nb) return -1;
    c->b = nb;
    block *b = &c->b[c->nb];
    memset(b, 0, sizeof *b);
    b->is_match = is_match;
    snprintf(b->where, sizeof b->where, "%s", where);
    if (cond && !(b->cond = strdup(cond))) return -1;
    c->nb++;
    return 0;
}

static int add_opt(ds_ssh_config *c, int kw, const char *name, const char *arg, const char *where) {
    block *b = &c->b[c->nb - 1];
    opt *no = realloc(b->opts, (size_t)(b->nopts + 1) * sizeof *no);
    if (!no) return -1;
    b->opts = no;
    opt *o = &b->opts[b->nopts];
    o->kw = kw;
    o->name = strdup(name);
    o->arg = strdup(arg);
    snprintf(o->where, sizeof o->where, "%s", where);
    if (!o->name || !o->arg) {
        free(o->name);
        free(o->arg);
        return -1;
    }
    b->nopts++;
    return 0;
}

static int keyword(const char *name) {
    for (size_t i = 0; i < sizeof KEYWORDS / sizeof KEYWORDS[0]; i++)
        if (!strcasecmp(name, KEYWORDS[i].name)) return KEYWORDS[i].kw;
    for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
        if (!strcasecmp(name, REFUSED[i])) return K_REFUSED;
    return K_IGNORED;
}

/* Next word of *p (double quotes group blanks; they are removed); NULL at the end. */
static char *next_word(char **p) {
    char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s) return NULL;
    char *w = s, *o = s;
    int quoted = 0;
    for (; *s && (quoted || (*s != ' ' && *s != '\t')); s++) {
        if (*s == '"') quoted = !quoted;
        else *o++ = *s;
    }
    if (*s) s++;
    *o = '\0';
    *p = s;
    return w;
}

static int parse_text(parser *ps, const char *name, const char *text);

/* Include FILE...: globs, relative to ~/.ssh. */
static int include(parser *ps, char *args, const char *where) {
    if (ps->depth >= MAX_INCLUDE_DEPTH)
        return ds_err_set(ps->err, "%s: Include nested more than %d deep", where, MAX_INCLUDE_DEPTH);
    int before = ps->c->nb;
    block *enclosing = &ps->c->b[ps->c->nb - 1];
    char *cond = enclosing->cond ? strdup(enclosing->cond) : NULL;
    int is_match = enclosing->is_match;
    if (enclosing->cond && !cond) return ds_err_set(ps->err, "out of memory");
    int rc = 0;
    for (char *w; rc == 0 && (w = next_word(&args));) {
        char pat[4200];
        if (w[0] == '~' && w[1] == '/') snprintf(pat, sizeof pat, "%s%s", home(), w + 1);
        else if (w[0] == '/') snprintf(pat, sizeof pat, "%s", w);
        else snprintf(pat, sizeof pat, "%s/.ssh/%s", home(), w);
        glob_t g;
        if (glob(pat, 0, NULL, &g) != 0) continue; /* no match: nothing to include, as in ssh */
        for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
            char *text = ds_textfile_read(g.gl_pathv[i], "an included ssh configuration", 1u << 20, ps->err);
            if (!text) {
                rc = -1;
                break;
            }
            ps->depth++;
            rc = parse_text(ps, g.gl_pathv[i], text);
            ps->depth--;
            free(text);
        }
        globfree(&g);
    }
    /* What follows the Include in this file is under the same condition as before it. */
    if (rc == 0 && ps->c->nb != before && add_block(ps->c, is_match, cond, where) != 0)
        rc = ds_err_set(ps->err, "out of memory");
    free(cond);
    return rc;
}

/* Checks a value of a keyword dslaunch uses, as ssh would when reading the file. */
static int check_value(parser *ps, int kw, const char *kwname, const char *arg, const char *where) {
    char *end;
    long v;
    switch (kw) {
    case K_PORT:
        v = strtol(arg, &end, 10);
        if (*end || v < 1 || v > 65535)
            return ds_err_set(ps->err, "%s: %s %s: expected a port, 1..65535", where, kwname, arg);
        return 0;
    case K_CONNECTTIMEOUT:
    case K_ALIVE:
        v = strtol(arg, &end, 10);
        if (*end || end == arg || v < 0 || v > 86400)
            return ds_err_set(ps->err, "%s: %s %s: expected seconds, 0..86400", where, kwname, arg);
        return 0;
    case K_IDENTITIESONLY:
        if (strcasecmp(arg, "yes") && strcasecmp(arg, "no"))
            return ds_err_set(ps->err, "%s: %s %s: expected yes or no", where, kwname, arg);
        return 0;
    case K_STRICT: {
        static const char *const ok[] = {"yes", "no", "ask", "accept-new", "off", "true", "false"};
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
            if (!strcasecmp(arg, ok[i])) return 0;
        return ds_err_set(ps->err, "%s: %s %s: expected yes, accept-new, no, off or ask", where, kwname, arg);
    }
    default: return 0;
    }
}

static int parse_line(parser *ps, char *line, const char *where) {
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#') return 0;
    char *kw = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '=') p++;
    char sep = *p;
    if (*p) *p++ = '\0';
    while (*p == ' ' || *p == '\t' || (sep != '=' && *p == '=' && (sep = '='))) p++;
    char *arg = p, *e = p + strlen(p);
    while (e > arg && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) *--e = '\0';
    if (!*kw) return ds_err_set(ps->err, "%s: expected a keyword", where);
    if (!*arg) return ds_err_set(ps->err, "%s: %s needs a value", where, kw);
    if (!strcasecmp(kw, "host") || !strcasecmp(kw, "match")) {
        /* the words without their quotes, one blank apart (a Match argument with blanks,
         * as `exec "cmd arg"`, is never evaluated) */
        char cond[4096] = "";
        size_t n = 0;
        for (char *w; (w = next_word(&arg)) && n < sizeof cond - 2;)
            n += (size_t)snprintf(cond + n, sizeof cond - n, "%s%s", n ? " " : "", w);
        return add_block(ps->c, !strcasecmp(kw, "match"), cond, where) ? ds_err_set(ps->err, "out of memory") : 0;
    }
    if (!strcasecmp(kw, "include")) return include(ps, arg, where);
    int k = keyword(kw);
    if (k == K_IGNORED) return 0;
    /* one argument: quotes around it removed (UserKnownHostsFile keeps its list) */
    if (k != K_KNOWNHOSTS && arg[0] == '"' && e - arg >= 2 && e[-1] == '"') {
        e[-1] = '\0';
        arg++;
    }
    if (check_value(ps, k, kw, arg, where) != 0) return -1;
    return add_opt(ps->c, k, kw, arg, where) ? ds_err_set(ps->err, "out of memory") : 0;
}

static int parse_text(parser *ps, const char *name, const char *text) {
    int lineno = 0;
    for (const char *p = text; *p;) {
        const char *eol = p + strcspn(p, "\n");
        lineno++;
        char line[4096], where[280];
        if ((size_t)(eol - p) >= sizeof line)
            return ds_err_set(ps->err, "%s:%d: line longer than %zu characters", name, lineno, sizeof line - 1);
        memcpy(line, p, (size_t)(eol - p));
        line[eol - p] = '\0';
        snprintf(where, sizeof where, "%.250s:%d", name, lineno);
        if (parse_line(ps, line, where) != 0) return -1;
        p = *eol ? eol + 1 : eol;
    }
    return 0;
}

ds_ssh_config *ds_ssh_config_parse(const char *name, const char *text, ds_err *err) {
    ds_ssh_config *c = calloc(1, sizeof *c);
    if (!c || add_block(c, 0, NULL, name) != 0) {
        ds_ssh_config_free(c);
        ds_err_set(err, "out of memory");
        return NULL;
    }
    parser ps = {c, err, 0};
    if (parse_text(&ps, name, text) != 0) {
        ds_ssh_config_free(c);
        return NULL;
    }
    return c;
}

ds_ssh_config *ds_ssh_config_load(const char *path, int must_exist, ds_err *err) {
    if (!must_exist && access(path, F_OK) != 0) return ds_ssh_config_parse(path, "", err);
    char *text = ds_textfile_read(path, "the ssh configuration", 4u << 20, err);
    if (!text) return NULL;
    ds_ssh_config *c = ds_ssh_config_parse(path, text, err);
    free(text);
    return c;
}

const char *ds_ssh_config_warnings(const ds_ssh_config *c) { return ds_buf_str(&c->warnings); }

void ds_ssh_config_free(ds_ssh_config *c) {
    if (!c) return;
    for (int i = 0; i < c->nb; i++) {
        for (int j = 0; j < c->b[i].nopts; j++) {
            free(c->b[i].opts[j].name);
            free(c->b[i].opts[j].arg);
        }
        free(c->b[i].opts);
        free(c->b[i].cond);
    }
    free(c->b);
    ds_buf_free(&c->warnings);
    free(c);
}

/* ---- matching ---- */

/* ssh's wildcards: '*' any run, '?' one character; host names compare without case. */
static int wild(const char *p, const char *s) {
    for (; *p; p++, s++) {
        if (*p == '*') {
            for (p++; *s; s++)
                if (wild(p, s)) return 1;
            return !*p;
        }
        if (!*s || (*p != '?' && tolower((unsigned char)*p) != tolower((unsigned char)*s))) return 0;
    }
    return !*s;
}

int ds_ssh_pattern_match(const char *patterns, const char *name) {
    int any = 0;
    for (const char *p = patterns; *p;) {
        size_t n = strcspn(p, " \t,");
        if (n > 0) {
            char pat[512];
            snprintf(pat, sizeof pat, "%.*s", (int)(n < sizeof pat ? n : sizeof pat - 1), p);
            int neg = pat[0] == '!';
            if (wild(pat + neg, name)) {
                if (neg) return 0;
                any = 1;
            }
        }
        p += n;
        p += strspn(p, " \t,");
    }
    return any;
}

static void warn(ds_ssh_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(ds_ssh_config *c, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (strstr(ds_buf_str(&c->warnings), msg)) return; /* once */
    ds_buf_printf(&c->warnings, "%s\n", msg);
}

/* A Match line: all / host / originalhost / localuser (each may be negated with '!').
 * Others (exec, user, canonical, final, ...) cannot be evaluated here: the block is
 * skipped, with a warning. */
static int match_block(ds_ssh_config *c, const block *b, const char *orig, const char *target) {
    char *copy = strdup(b->cond), *p = copy;
    if (!copy) return 0;
    int ok = 1;
    for (char *w; ok && (w = next_word(&p));) {
        if (!strcasecmp(w, "all")) continue;
        int neg = w[0] == '!';
        const char *crit = w + neg;
        const char *subject = !strcasecmp(crit, "host") ? target
                              : !strcasecmp(crit, "originalhost") ? orig : NULL;
        char me[256] = "";
        if (!strcasecmp(crit, "localuser")) {
            struct passwd *pw = getpwuid(getuid());
            snprintf(me, sizeof me, "%s", pw ? pw->pw_name : "");
            subject = me;
        }
        char *arg = next_word(&p);
        if (!subject || !arg) {
            warn(c, "%s: Match %s is not supported by dslaunch: the block is skipped", b->where, crit);
            ok = 0;
            break;
        }
        ok = ds_ssh_pattern_match(arg, subject) != neg;
    }
    free(copy);
    return ok;
}

/* ---- lookup ---- */

void ds_ssh_host_free(ds_ssh_host *h) {
    free(h->hostname);
    free(h->user);
    for (int i = 0; i < h->nidentity; i++) free(h->identity_files[i]);
    free(h->identity_files);
    free(h->proxy_jump);
    for (int i = 0; i < h->nknown; i++) free(h->known_hosts[i]);
    free(h->known_hosts);
    memset(h, 0, sizeof *h);
}

static int push(char ***v, int *n, const char *s) {
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

/* HostName's %h (the name given) and %%. */
static char *expand_hostname(const char *arg, const char *orig) {
    ds_buf b = {0};
    for (const char *p = arg; *p; p++) {
        if (p[0] == '%' && p[1] == 'h') ds_buf_puts(&b, orig), p++;
        else if (p[0] == '%' && p[1] == '%') ds_buf_puts(&b, "%"), p++;
        else ds_buf_put(&b, p, 1);
    }
    if (b.oom || ds_buf_puts(&b, "") != 0) {
        ds_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

static int strict_mode(const char *arg) {
    if (!strcasecmp(arg, "accept-new")) return DS_HOSTKEY_ACCEPT_NEW;
    if (!strcasecmp(arg, "no") || !strcasecmp(arg, "off") || !strcasecmp(arg, "false")) return DS_HOSTKEY_NO;
    return DS_HOSTKEY_YES; /* yes, true, ask: with no one to ask, ask is yes */
}

/* UserKnownHostsFile's list of files ("none" lists none). */
static int known_hosts(ds_ssh_host *h, const char *arg) {
    char *copy = strdup(arg), *p = copy;
    int rc = copy ? 0 : -1;
    for (char *w; rc == 0 && (w = next_word(&p));)
        if (strcasecmp(w, "none")) rc = push(&h->known_hosts, &h->nknown, w);
    free(copy);
    return rc;
}

/* Applies o to h where h has nothing yet (IdentityFile adds). 0, or -1 with err set. */
static int apply(ds_ssh_host *h, const opt *o, const char *orig, int *jump_seen, int *known_seen,
                 ds_err *err) {
    int oom = 0;
    switch (o->kw) {
    case K_HOSTNAME:
        if (h->hostname) return 0;
        snprintf(h->where, sizeof h->where, "%s", o->where);
        oom = !(h->hostname = expand_hostname(o->arg, orig));
        break;
    case K_USER: oom = !h->user && !(h->user = strdup(o->arg)); break;
    case K_PORT:
        if (!h->port) h->port = atoi(o->arg);
        break;
    case K_IDENTITYFILE:
        if (strcasecmp(o->arg, "none")) oom = push(&h->identity_files, &h->nidentity, o->arg) != 0;
        break;
    case K_IDENTITIESONLY:
        if (h->identities_only < 0) h->identities_only = !strcasecmp(o->arg, "yes");
        break;
    case K_PROXYJUMP: /* the first one wins, "none" included */
        if (!(*jump_seen)++ && strcasecmp(o->arg, "none")) oom = !(h->proxy_jump = strdup(o->arg));
        break;
    case K_STRICT:
        if (h->strict < 0) h->strict = strict_mode(o->arg);
        break;
    case K_KNOWNHOSTS:
        if (!(*known_seen)++) oom = known_hosts(h, o->arg) != 0;
        break;
    case K_CONNECTTIMEOUT:
        if (!h->connect_timeout_ms) h->connect_timeout_ms = atoi(o->arg) * 1000;
        break;
    case K_ALIVE:
        if (h->alive_interval_s < 0) h->alive_interval_s = atoi(o->arg);
        break;
    case K_REFUSED:
        if (!strcasecmp(o->arg, "none") || !strcasecmp(o->arg, "no")) break;
        return ds_err_set(err, "%s: %s is not supported by dslaunch (it connects with libssh2 "
                               "itself%s)", o->where, o->name,
                          !strcasecmp(o->name, "proxycommand") ? "; ProxyJump is supported" : "");
    }
    return oom ? ds_err_set(err, "out of memory") : 0;
}

int ds_ssh_config_lookup(const ds_ssh_config *c, const char *host, ds_ssh_host *out, ds_err *err) {
    memset(out, 0, sizeof *out);
    out->identities_only = out->strict = out->alive_interval_s = -1;
    int jump_seen = 0, known_seen = 0;
    for (int i = 0; i < c->nb; i++) {
        const block *b = &c->b[i];
        int on = !b->cond ? 1
                 : b->is_match ? match_block((ds_ssh_config *)c, b, host, out->hostname ? out->hostname : host)
                               : ds_ssh_pattern_match(b->cond, host);
        for (int j = 0; on && j < b->nopts; j++) {
            if (apply(out, &b->opts[j], host, &jump_seen, &known_seen, err) == 0) continue;
            ds_ssh_host_free(out);
            return -1;
        }
    }
    return 0;
}
