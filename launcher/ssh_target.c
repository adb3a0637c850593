/* ssh_target: see ssh_target.h. */
#include "ssh_target.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_buf.h"

#define MAX_JUMPS 8
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_ALIVE_S 5 /* a dead link is noticed within a few intervals */

static const char *home(void) {
    const char *h = getenv("HOME");
    if (h && *h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_dir : "/";
}

static const char *local_user(void) {
    const char *u = getenv("USER");
    if (u && *u) return u;
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_name : "root";
}

void ds_ssh_opts_free(ds_ssh_opts *o) {
    if (!o) return;
    free(o->name);
    free(o->host);
    free(o->user);
    for (int i = 0; i < o->nidentities; i++) free(o->identities[i]);
    free(o->identities);
    for (int i = 0; i < o->nknown; i++) free(o->known_hosts[i]);
    free(o->known_hosts);
    for (int i = 0; i < o->njumps; i++) ds_ssh_opts_free(&o->jumps[i]);
    free(o->jumps);
    memset(o, 0, sizeof *o);
}

/* A path of the ssh configuration: ~/ and ssh's %d %u %r %h %n %p %% tokens. */
static char *expand_path(const char *path, const ds_ssh_opts *o) {
    ds_buf b = {0};
    if (path[0] == '~' && (path[1] == '/' || !path[1])) {
        ds_buf_puts(&b, home());
        path++;
    }
    for (const char *p = path; *p; p++) {
        if (*p != '%' || !p[1]) {
            ds_buf_put(&b, p, 1);
            continue;
        }
        switch (*++p) {
        case 'd': ds_buf_puts(&b, home()); break;
        case 'u': ds_buf_puts(&b, local_user()); break;
        case 'r': ds_buf_puts(&b, o->user); break;
        case 'h': ds_buf_puts(&b, o->host); break;
        case 'n': ds_buf_puts(&b, o->name); break;
        case 'p': ds_buf_printf(&b, "%d", o->port); break;
        default: ds_buf_put(&b, p - (*p != '%'), 1 + (*p != '%')); /* %% is %; others as written */
        }
    }
    if (ds_buf_puts(&b, "") != 0 || b.oom) {
        ds_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

static int push_path(char ***v, int *n, const char *path, const ds_ssh_opts *o) {
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = expand_path(path, o))) return -1;
    (*n)++;
    return 0;
}

/* ssh's default keys: those of ~/.ssh that exist (libssh2 1.10 signs RSA with SHA-1
 * only, which OpenSSH >= 8.8 refuses: ed25519 and ECDSA first); id_ed25519 when none
 * does, so that a failure names what was looked for. */
static int default_identities(ds_ssh_opts *o) {
    static const char *const KEYS[] = {"~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        char *path = expand_path(KEYS[i], o);
        if (!path) return -1;
        int there = access(path, F_OK) == 0;
        free(path);
        if (there && push_path(&o->identities, &o->nidentities, KEYS[i], o) != 0) return -1;
    }
    return o->nidentities ? 0 : push_path(&o->identities, &o->nidentities, KEYS[0], o);
}

/* One host: spec's explicit [ssh] keys (the destination only, as ssh's command-line
 * options), else the configuration's, else the defaults. user and port given in a
 * ProxyJump hop win over all. */
static int resolve(const ds_jobspec *spec, const ds_ssh_config *cfg, const char *name,
                   const char *hop_user, int hop_port, ds_ssh_opts *o, ds_ssh_host *h, ds_err *err) {
    memset(o, 0, sizeof *o);
    if (ds_ssh_config_lookup(cfg, name, h, err) != 0) return -1;
    const char *user = hop_user ? hop_user : spec && spec->ssh_user ? spec->ssh_user : h->user ? h->user : local_user();
    o->name = strdup(name);
    o->host = strdup(h->hostname ? h->hostname : name);
    o->user = strdup(user);
    if (!o->name || !o->host || !o->user) return ds_err_set(err, "out of memory");
    o->port = hop_port ? hop_port : spec && spec->ssh_port ? spec->ssh_port : h->port ? h->port : 22;
    o->check = spec && spec->host_key_check >= 0 ? spec->host_key_check
               : h->strict >= 0                  ? h->strict
                                                 : DS_HOSTKEY_YES;
    o->timeout_ms = spec && spec->ssh_connect_timeout_ms ? spec->ssh_connect_timeout_ms
                    : h->connect_timeout_ms              ? h->connect_timeout_ms
                                                         : DEFAULT_TIMEOUT_MS;
    o->alive_interval_s = h->alive_interval_s >= 0 ? h->alive_interval_s : DEFAULT_ALIVE_S;
    int bad = 0;
    if (spec && spec->ssh_identity) {
        bad |= push_path(&o->identities, &o->nidentities, spec->ssh_identity, o);
    } else {
        o->use_agent = h->identities_only != 1;
        for (int i = 0; i < h->nidentity; i++) bad |= push_path(&o->identities, &o->nidentities, h->identity_files[i], o);
        if (!h->nidentity) bad |= default_identities(o);
    }
    if (spec && spec->ssh_known_hosts) bad |= push_path(&o->known_hosts, &o->nknown, spec->ssh_known_hosts, o);
    for (int i = 0; !(spec && spec->ssh_known_hosts) && i < h->nknown; i++)
        bad |= push_path(&o->known_hosts, &o->nknown, h->known_hosts[i], o);
    if (!o->nknown) bad |= push_path(&o->known_hosts, &o->nknown, "~/.ssh/known_hosts", o);
    return bad ? ds_err_set(err, "out of memory") : 0;
}

/* One ProxyJump hop: [user@]host[:port] (or [user@][v6addr]:port). */
static int jump_hop(const ds_ssh_config *cfg, const char *hop, const char *name, ds_ssh_opts *o, ds_err *err) {
    char buf[512], *user = NULL, *host = buf;
    int port = 0;
    snprintf(buf, sizeof buf, "%s", hop);
    char *at = strrchr(buf, '@');
    if (at) {
        *at = '\0';
        user = buf;
        host = at + 1;
    }
    char *colon = host[0] == '[' ? strstr(host, "]:") : strchr(host, ':');
    if (host[0] == '[') {
        if (colon) *colon++ = '\0';
        host++;
        host[strcspn(host, "]")] = '\0';
    } else if (colon && strchr(colon + 1, ':')) {
        colon = NULL; /* a bare IPv6 address: no port */
    } else if (colon) {
        *colon = '\0';
    }
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || v < 1 || v > 65535)
            return ds_err_set(err, "%s: ProxyJump hop '%s': bad port", name, hop);
        port = (int)v;
    }
    if (!*host || (user && !*user)) return ds_err_set(err, "%s: ProxyJump hop '%s': expected [user@]host[:port]", name, hop);
    ds_ssh_host h;
    int rc = resolve(NULL, cfg, host, user, port, o, &h, err);
    if (rc == 0 && h.proxy_jump)
        rc = ds_err_set(err, "%s: ProxyJump hop %s has a ProxyJump of its own (%s): list every hop in "
                             "the first one instead (ProxyJump a,b)", name, host, h.proxy_jump);
    ds_ssh_host_free(&h);
    return rc;
}

int ds_ssh_target(const ds_jobspec *spec, const ds_ssh_config *cfg, const char *name, ds_ssh_opts *out,
                  ds_err *err) {
    ds_ssh_host h;
    int rc = resolve(spec, cfg, name, NULL, 0, out, &h, err);
    if (rc == 0 && h.proxy_jump) {
        const char *p = h.proxy_jump;
        out->jumps = calloc(MAX_JUMPS, sizeof *out->jumps);
        if (!out->jumps) rc = ds_err_set(err, "out of memory");
        while (rc == 0 && *p) {
            size_t n = strcspn(p, ",");
            char hop[512];
            snprintf(hop, sizeof hop, "%.*s", (int)(n < sizeof hop ? n : sizeof hop - 1), p);
            if (out->njumps == MAX_JUMPS)
                rc = ds_err_set(err, "%s: ProxyJump %s: more than %d hops", name, h.proxy_jump, MAX_JUMPS);
            else if ((rc = jump_hop(cfg, hop, name, &out->jumps[out->njumps], err)) == 0)
                out->njumps++;
            else
                ds_ssh_opts_free(&out->jumps[out->njumps]);
            p += n + (p[n] == ',');
        }
    }
    ds_ssh_host_free(&h);
    if (rc != 0) ds_ssh_opts_free(out);
    return rc;
}

char *ds_ssh_target_host(const ds_ssh_config *cfg, const char *name, ds_err *err) {
    ds_ssh_host h;
    if (ds_ssh_config_lookup(cfg, name, &h, err) != 0) return NULL;
    char *host = strdup(h.hostname ? h.hostname : name);
    ds_ssh_host_free(&h);
    if (!host) ds_err_set(err, "out of memory");
    return host;
}

ds_ssh_config *ds_ssh_config_for(const ds_jobspec *spec, ds_err *err) {
    if (spec->ssh_config) return ds_ssh_config_load(spec->ssh_config, 1, err);
    char path[4200];
    snprintf(path, sizeof path, "%s/.ssh/config", home());
    return ds_ssh_config_load(path, 0, err);
}
