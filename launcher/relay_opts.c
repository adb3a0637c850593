/* relay_opts.h */
#include "relay_opts.h"

#include <stdlib.h>
#include <string.h>

static int put(ds_buf *b, const char *key, const char *val) {
    if (!val) return 0;
    if (strchr(val, '\n')) return -1;
    return ds_buf_printf(b, "\n%s=%s", key, val);
}

static int put_hop(ds_buf *b, const ds_ssh_opts *o) {
    int bad = put(b, "name", o->name) | put(b, "host", o->host) | put(b, "user", o->user) |
              ds_buf_printf(b, "\nport=%d\nagent=%d\ncheck=%d\ntimeout_ms=%d\nalive_s=%d", o->port, o->use_agent,
                            (int)o->check, o->timeout_ms, o->alive_interval_s);
    for (int i = 0; i < o->nidentities; i++) bad |= put(b, "identity", o->identities[i]);
    for (int i = 0; i < o->nknown; i++) bad |= put(b, "known", o->known_hosts[i]);
    return bad;
}

int ds_relay_opts_put(ds_buf *b, const ds_ssh_opts *o, const char *command) {
    int bad = ds_buf_puts(b, "ssh") | put(b, "command", command) | put_hop(b, o);
    for (int i = 0; i < o->njumps; i++) bad |= ds_buf_puts(b, "\njump") | put_hop(b, &o->jumps[i]);
    return bad ? -1 : 0;
}

static int push(char ***list, int *n, const char *val) {
    char **l = realloc(*list, sizeof *l * (size_t)(*n + 1));
    if (!l) return -1;
    *list = l;
    return (l[(*n)++] = strdup(val)) ? 0 : -1;
}

static int set_key(ds_ssh_opts *o, const char *key, const char *val) {
    char **s = !strcmp(key, "name") ? &o->name : !strcmp(key, "host") ? &o->host : !strcmp(key, "user") ? &o->user : NULL;
    if (s) {
        free(*s);
        return (*s = strdup(val)) ? 0 : -1;
    }
    if (!strcmp(key, "identity")) return push(&o->identities, &o->nidentities, val);
    if (!strcmp(key, "known")) return push(&o->known_hosts, &o->nknown, val);
    int v = atoi(val);
    if (!strcmp(key, "port")) o->port = v;
    else if (!strcmp(key, "agent")) o->use_agent = v;
    else if (!strcmp(key, "check")) o->check = (ds_hostkey_check)v;
    else if (!strcmp(key, "timeout_ms")) o->timeout_ms = v;
    else if (!strcmp(key, "alive_s")) o->alive_interval_s = v;
    else return -1;
    return 0;
}

int ds_relay_opts_get(const char *p, size_t len, ds_ssh_opts *o, char **command, ds_err *err) {
    memset(o, 0, sizeof *o);
    *command = NULL;
    char *text = strndup(p, len), *save = NULL;
    if (!text) return ds_err_set(err, "out of memory");
    ds_ssh_opts *hop = o;
    int rc = 0;
    for (char *line = strtok_r(text, "\n", &save); line && rc == 0; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!strcmp(line, "ssh")) continue;
        if (!strcmp(line, "jump")) {
            ds_ssh_opts *j = realloc(o->jumps, sizeof *j * (size_t)(o->njumps + 1));
            if (!j) {
                rc = -1;
                break;
            }
            o->jumps = j;
            hop = &j[o->njumps++];
            memset(hop, 0, sizeof *hop);
            continue;
        }
        if (!eq) {
            rc = -1;
            break;
        }
        *eq = 0;
        if (!strcmp(line, "command") && hop == o) {
            free(*command);
            rc = (*command = strdup(eq + 1)) ? 0 : -1;
        } else {
            rc = set_key(hop, line, eq + 1);
        }
    }
    free(text);
    if (rc == 0 && o->host && *command) return 0;
    ds_ssh_opts_free(o);
    free(*command);
    *command = NULL;
    return ds_err_set(err, "a malformed SSH target for a relayed node");
}
