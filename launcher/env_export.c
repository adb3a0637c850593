/* What of dslaunch's own world reaches every rank's environment on every node (local
 * ranks inherit the agent's environment; remote ones get only what the plan sends).
 * See env_export.h and docs/running.md#environment. */
#include "env_export.h"

#include <ctype.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ds_textfile.h"

/* The variables DeepSpeed's launcher passes to its nodes by prefix. */
static const char *const PREFIXES[] = {"NCCL_", "PYTHON", "UCX_", "CUDA_", "OMP_"};

typedef struct env_list {
    ds_env_var *v;
    int n;
} env_list;

static void list_free(env_list *l) {
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].key);
        free(l->v[i].value);
    }
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Sets key (replacing an earlier value, keeping its place). */
static int put(env_list *l, const char *key, size_t klen, const char *value, size_t vlen, ds_err *err) {
    char *k = strndup(key, klen), *v = strndup(value, vlen);
    if (!k || !v) goto oom;
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->v[i].key, k)) continue;
        free(k);
        free(l->v[i].value);
        l->v[i].value = v;
        return 0;
    }
    ds_env_var *nv = realloc(l->v, (size_t)(l->n + 1) * sizeof *nv);
    if (!nv) goto oom;
    l->v = nv;
    l->v[l->n++] = (ds_env_var){k, v};
    return 0;
oom:
    free(k);
    free(v);
    return ds_err_set(err, "out of memory");
}

static int valid_name(const char *s, size_t n) {
    if (n == 0 || isdigit((unsigned char)s[0])) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return 0;
    return 1;
}

static int has_prefix(const char *kv) {
    for (size_t i = 0; i < sizeof PREFIXES / sizeof PREFIXES[0]; i++)
        if (!strncmp(kv, PREFIXES[i], strlen(PREFIXES[i]))) return 1;
    return 0;
}

static int from_prefixes(env_list *l, char *const *environ_, ds_err *err) {
    for (int i = 0; environ_ && environ_[i]; i++) {
        const char *kv = environ_[i], *eq = strchr(kv, '=');
        if (!eq || !has_prefix(kv)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - kv), kv);
        if (!valid_name(kv, (size_t)(eq - kv)) || ds_env_reserved(name)) continue;
        if (put(l, kv, (size_t)(eq - kv), eq + 1, strlen(eq + 1), err) != 0) return -1;
    }
    return 0;
}

/* KEY=VALUE lines (an optional `export ` before; one pair of quotes around the value is
 * removed, as the shell DeepSpeed hands these lines to would), blank lines and # comments.
 * A missing file is no error. */
static int from_file(env_list *l, const char *path, ds_err *err) {
    if (access(path, F_OK) != 0) return 0;
    char *text = ds_textfile_read(path, "the environment file", 1u << 20, err);
    if (!text) return -1;
    int rc = 0, line = 0;
    for (char *p = text, *eol; rc == 0 && *p; p = eol + (*eol != '\0')) {
        eol = p + strcspn(p, "\n");
        line++;
        char *s = p, *e = eol;
        while (s < e && isspace((unsigned char)*s)) s++;
        while (e > s && isspace((unsigned char)e[-1])) e--;
        if (s == e || *s == '#') continue;
        if (e - s > 7 && !strncmp(s, "export", 6) && (s[6] == ' ' || s[6] == '\t'))
            for (s += 7; s < e && isspace((unsigned char)*s);) s++;
        char *eq = memchr(s, '=', (size_t)(e - s));
        if (!eq || !valid_name(s, (size_t)(eq - s))) {
            rc = ds_err_set(err, "%s:%d: expected KEY=VALUE (a variable name, '=', its value)", path, line);
            break;
        }
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - s), s);
        if (ds_env_reserved(name)) {
            rc = ds_err_set(err, "%s:%d: %s is set by dslaunch for every rank; it cannot be overridden",
                            path, line, name);
            break;
        }
        char *v = eq + 1;
        if (e - v >= 2 && (*v == '"' || *v == '\'') && e[-1] == *v) v++, e--;
        rc = put(l, s, (size_t)(eq - s), v, (size_t)(e - v), err);
    }
    free(text);
    return rc;
}

/* --export VAR[,VAR...] (VAR=VALUE also takes that value). */
static int from_exports(env_list *l, const char *const *exports, int nexports, ds_err *err) {
    for (int i = 0; i < nexports; i++) {
        for (const char *p = exports[i]; *p;) {
            size_t n = strcspn(p, ",");
            const char *eq = memchr(p, '=', n);
            size_t klen = eq ? (size_t)(eq - p) : n;
            char name[256];
            snprintf(name, sizeof name, "%.*s", (int)(klen < 200 ? klen : 200), p);
            if (!valid_name(p, klen))
                return ds_err_set(err, "--export %s: '%.*s' is not a variable name", exports[i], (int)n, p);
            if (ds_env_reserved(name))
                return ds_err_set(err, "--export %s: %s is set by dslaunch for every rank", exports[i], name);
            const char *value = eq ? eq + 1 : getenv(name);
            if (!value)
                return ds_err_set(err, "--export %s: %s is not set in this environment", exports[i], name);
            if (put(l, p, klen, value, eq ? n - klen - 1 : strlen(value), err) != 0) return -1;
            p += n + (p[n] == ',');
        }
    }
    return 0;
}

static const char *home(void) {
    const char *h = getenv("HOME");
    if (h && *h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_dir : "/";
}

int ds_env_collect(ds_jobspec *spec, const char *const *exports, int nexports, char *const *environ_,
                   ds_err *err) {
    env_list l = {0};
    const char *ds_name = getenv("DS_ENV_FILE"); /* DeepSpeed's way to rename .deepspeed_env */
    if (!ds_name || !*ds_name) ds_name = ".deepspeed_env";
    const char *dirs[] = {home(), spec->workdir};
    const char *names[] = {ds_name, ".dslaunch_env"};
    int rc = from_prefixes(&l, environ_, err);
    for (int d = 0; rc == 0 && d < 2; d++) {
        for (int f = 0; rc == 0 && f < 2; f++) {
            char path[4200];
            snprintf(path, sizeof path, "%s/%s", dirs[d], names[f]);
            if (d == 1 && !strcmp(dirs[0], dirs[1])) break; /* home is the workdir: read once */
            rc = from_file(&l, path, err);
        }
    }
    if (rc == 0) rc = from_exports(&l, exports, nexports, err);
    for (int i = 0; rc == 0 && i < spec->nenv; i++)
        rc = put(&l, spec->env[i].key, strlen(spec->env[i].key), spec->env[i].value,
                 strlen(spec->env[i].value), err);
    if (rc != 0) {
        list_free(&l);
        return -1;
    }
    env_list old = {spec->env, spec->nenv};
    list_free(&old);
    spec->env = l.v;
    spec->nenv = l.n;
    return 0;
}
