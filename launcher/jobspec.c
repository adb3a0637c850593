/* jobspec: see jobspec.h and docs/jobspec.md. inih does the INI syntax; every key goes
 * through one table (section, key, type, range, field) so that validation, defaults and
 * docs stay in step. inih's handler gets no line numbers, so lines are fed to it by our
 * own reader, which counts them (and left-trims each line, which turns inih's
 * indented-continuation lines off: an indented key is just a key). */
#include "ds_textfile.h"
#include "jobspec.h"

#include <ctype.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum {
    K_STR,     /* any text; empty allowed only with ALLOW_EMPTY (then stored as NULL) */
    K_NAME,    /* [A-Za-z0-9._-]+ */
    K_PATH,    /* a path; ~/ expanded */
    K_ABSPATH, /* an absolute path */
    K_ARGS,    /* shell-style word list */
    K_COMMAND, /* shell-style word list: the program, then its arguments */
    K_INTERP,  /* shell-style word list: the interpreter of a program that is not Lua */
    K_INT,
    K_LLONG,
    K_SECONDS, /* decimal seconds (up to ms precision) stored as int milliseconds */
    K_BOOL,
    K_ENUM,    /* one of choices ("a|b|c"), stored as its index */
    K_TEE,
    K_WORDS,   /* words of choices, separated by commas or blanks, or "none"; stored as
                  a bit per choice */
    K_URL,     /* an http:// or https:// URL */
    K_MODE,    /* file mode bits in octal, 0700..0777 (the owner keeps rwx) */
    K_SIGNALS, /* signal names (TERM, HUP, USR1, USR2) separated by commas or spaces, or
                  none: stored as a mask of 1 << signal number */
} key_type;

#define ALLOW_EMPTY 1

typedef struct key_def {
    const char *section, *key;
    key_type type;
    size_t off;
    long long lo, hi;
    const char *choices;
    int flags;
} key_def;

#define F(field) offsetof(ds_jobspec, field)
static const key_def KEYS[] = {
    {"job", "name", K_NAME, F(name), 0, 0, NULL, 0},
    {"job", "script", K_STR, F(script), 0, 0, NULL, 0},
    {"job", "args", K_ARGS, 0, 0, 0, NULL, ALLOW_EMPTY},
    {"job", "command", K_COMMAND, 0, 0, 0, NULL, 0},
    {"job", "interpreter", K_INTERP, 0, 0, 0, NULL, 0},
    {"job", "local_rank_arg", K_BOOL, F(local_rank_arg), 0, 1, NULL, 0},
    {"job", "workdir", K_PATH, F(workdir), 0, 0, NULL, 0},
    {"job", "dsrun", K_ABSPATH, F(dsrun), 0, 0, NULL, 0},
    {"resources", "hostfile", K_PATH, F(hostfile), 0, 0, NULL, 0},
    {"resources", "include", K_STR, F(include), 0, 0, NULL, ALLOW_EMPTY},
    {"resources", "exclude", K_STR, F(exclude), 0, 0, NULL, ALLOW_EMPTY},
    {"resources", "num_nodes", K_INT, F(num_nodes), 1, 100000, NULL, 0},
    {"resources", "num_gpus", K_INT, F(num_gpus), 1, 4096, NULL, 0},
    {"resources", "device", K_ENUM, F(device), 0, 0, "auto|cpu|cuda", 0},
    {"resources", "source", K_ENUM, F(host_source), 0, 0, "auto|hostfile|slurm|local", 0},
    {"launch", "method", K_ENUM, F(launch_method), 0, 0, "auto|ssh|srun|local", 0},
    {"launch", "max_handshakes", K_INT, F(max_handshakes), 1, 100000, NULL, 0},
    {"launch", "relay_threshold", K_INT, F(relay_threshold), 0, 1000000, NULL, 0},
    {"launch", "relay_fanout", K_INT, F(relay_fanout), 0, 100000, NULL, 0},
    {"ssh", "user", K_STR, F(ssh_user), 0, 0, NULL, 0},
    {"ssh", "port", K_INT, F(ssh_port), 1, 65535, NULL, 0},
    {"ssh", "identity", K_PATH, F(ssh_identity), 0, 0, NULL, 0},
    {"ssh", "known_hosts", K_PATH, F(ssh_known_hosts), 0, 0, NULL, 0},
    {"ssh", "host_key_check", K_ENUM, F(host_key_check), 0, 0, "yes|accept-new|no", 0},
    {"ssh", "connect_timeout", K_SECONDS, F(ssh_connect_timeout_ms), 1, 3600000, NULL, 0},
    {"ssh", "force", K_BOOL, F(ssh_force), 0, 1, NULL, 0},
    {"ssh", "config", K_PATH, F(ssh_config), 0, 0, NULL, 0},
    {"rendezvous", "addr", K_STR, F(rdzv_addr), 0, 0, NULL, 0},
    {"rendezvous", "port", K_INT, F(rdzv_port), 0, 65535, NULL, 0},
    {"rendezvous", "timeout", K_SECONDS, F(rdzv_timeout_ms), 1, 86400000, NULL, 0},
    {"rendezvous", "master_port", K_INT, F(master_port), 0, 65535, NULL, 0},
    {"restart", "max_restarts", K_INT, F(max_restarts), 0, 1000, NULL, 0},
    {"restart", "spares", K_INT, F(spares), 0, 100000, NULL, 0},
    {"restart", "heartbeat_interval", K_SECONDS, F(heartbeat_interval_ms), 1, 3600000, NULL, 0},
    {"restart", "heartbeat_timeout", K_SECONDS, F(heartbeat_timeout_ms), 1, 86400000, NULL, 0},
    {"restart", "node_retries", K_INT, F(node_retries), 1, 1000, NULL, 0},
    {"restart", "min_nodes", K_INT, F(min_nodes), 0, 100000, NULL, 0},
    {"restart", "backoff", K_SECONDS, F(backoff_ms), 0, 3600000, NULL, 0},
    {"restart", "backoff_max", K_SECONDS, F(backoff_max_ms), 0, 86400000, NULL, 0},
    {"restart", "drain_signals", K_SIGNALS, F(drain_signals), 0, 0, NULL, 0},
    {"restart", "drain_timeout", K_SECONDS, F(drain_timeout_ms), 1, 86400000, NULL, 0},
    {"restart", "hang_timeout", K_SECONDS, F(hang_timeout_ms), 0, 86400000, NULL, 0},
    {"notify", "webhook", K_URL, F(webhook), 0, 0, NULL, 0},
    {"notify", "timeout", K_SECONDS, F(notify_timeout_ms), 1, 600000, NULL, 0},
    {"logs", "dir", K_PATH, F(log_dir), 0, 0, NULL, 0},
    {"logs", "tee", K_TEE, F(tee), 0, 0, NULL, 0},
    {"logs", "mode", K_MODE, F(log_mode), 0, 0, NULL, 0},
    {"checkpoint", "mode", K_MODE, F(ckpt_mode), 0, 0, NULL, 0},
    /* [engine] keys are common/engine_opts.h's */
    {"monitor", "outputs", K_WORDS, F(monitor_outputs), 0, 0, "jsonl|tensorboard|report|progress", 0},
    {"monitor", "steps_per_print", K_INT, F(steps_per_print), 1, 1 << 30, NULL, 0},
    {"monitor", "metrics_port", K_INT, F(metrics_port), 0, 65535, NULL, 0},
    {"monitor", "metrics_addr", K_STR, F(metrics_addr), 0, 0, NULL, 0},
};
#undef F
#define NKEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const char *SECTIONS[] = {"job", "resources", "launch", "ssh", "env", "rendezvous",
                                 "restart", "notify", "logs", "checkpoint", "engine", "monitor"};
#define NSECTIONS ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))

static const char *RESERVED_ENV[] = {"GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
                                     "ROLE_WORLD_SIZE", "ROLE_NAME", "TORCHELASTIC_RESTART_COUNT",
                                     "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                                     "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                     "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_JOB_ID",
                                     "DS_ATTEMPT", "DS_RDZV", "DS_STORE_TOKEN",
                                     "CUDA_VISIBLE_DEVICES", "DS_CKPT_MODE", "DS_ENGINE_GIVEN"};

int ds_env_reserved(const char *name) {
    for (size_t i = 0; i < sizeof RESERVED_ENV / sizeof RESERVED_ENV[0]; i++)
        if (!strcmp(name, RESERVED_ENV[i])) return 1;
    for (int i = 0; i < DS_EO_COUNT; i++) { /* the [engine] options' DS_ENGINE_* */
        char env[64];
        ds_engine_opt_env_name(&DS_ENGINE_OPTS[i], env, sizeof env);
        if (!strcmp(name, env)) return 1;
    }
    return 0;
}

/* ---- small string helpers ---- */


static void set_str(char **field, char *value) {
    free(*field);
    *field = value;
}

/* Joins base and rel ("/a/b" + "../c" -> "/a/c"), resolving "." and ".." textually. */
static char *path_join(const char *base, const char *rel) {
    size_t cap = strlen(base) + strlen(rel) + 3;
    char *joined = malloc(cap);
    char *out = malloc(cap);
    if (!joined || !out) {
        free(joined);
        free(out);
        return NULL;
    }
    if (rel[0] == '/') snprintf(joined, cap, "%s", rel);
    else snprintf(joined, cap, "%s/%s", base, rel);
    size_t len = 0;
    const char *p = joined;
    while (*p) {
        while (*p == '/') p++;
        size_t n = strcspn(p, "/");
        if (n == 0) break;
        if (n == 1 && p[0] == '.') {
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (len > 0 && out[len - 1] != '/') len--;
            if (len > 0) len--;
        } else {
            out[len++] = '/';
            memcpy(out + len, p, n);
            len += n;
        }
        p += n;
    }
    if (len == 0) out[len++] = '/';
    out[len] = '\0';
    free(joined);
    return out;
}

/* The absolute directory holding path (relative to the current directory). */
static char *dir_of(const char *path) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "/");
    char *abs = path_join(cwd, path);
    if (!abs) return NULL;
    char *slash = strrchr(abs, '/');
    if (slash == abs) slash[1] = '\0';
    else *slash = '\0';
    return abs;
}

static const char *home_dir(void) {
    const char *h = getenv("HOME");
    if (h && *h) return h;
    struct passwd *pw = getpwuid(getuid());
    return pw ? pw->pw_dir : "/";
}

/* "~/x" -> "$HOME/x"; other paths unchanged. */
static char *expand_home(const char *path) {
    if (path[0] != '~' || (path[1] != '/' && path[1] != '\0')) return strdup(path);
    const char *home = home_dir();
    size_t n = strlen(home) + strlen(path) + 1;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s", home, path + 1);
    return p;
}

/* The dsrun beside this executable: DIR/dsrun when installed side by side, else the build
 * tree's DIR/../runtime/dsrun. When neither exists, the build-tree path (the error then
 * names a path that says what was expected). */
static char *default_dsrun(void) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *dir = dir_of(exe);
    if (!dir) return NULL;
    char *side = path_join(dir, "dsrun");
    char *tree = path_join(dir, "../runtime/dsrun");
    free(dir);
    if (side && access(side, X_OK) == 0) {
        free(tree);
        return side;
    }
    free(side);
    return tree;
}

/* ---- value parsers ---- */

/* [-]digits into *v; 0 ok, -1 not an integer, -2 out of long long range. */
static int parse_llong(const char *s, long long *v) {
    const char *p = s;
    int neg = *p == '-';
    if (neg) p++;
    if (!*p) return -1;
    long long acc = 0;
    int over = 0;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p)) return -1;
        int d = *p - '0';
        if (acc > (LLONG_MAX - d) / 10) over = 1;
        else acc = acc * 10 + d;
    }
    if (over) return -2;
    *v = neg ? -acc : acc;
    return 0;
}

/* "12", "0.5", "2.125" seconds -> milliseconds; 0 ok, -1 bad syntax, -2 too large. */
static int parse_seconds_ms(const char *s, long long *ms) {
    const char *dot = strchr(s, '.');
    size_t ilen = dot ? (size_t)(dot - s) : strlen(s);
    if (ilen == 0 || ilen > 12) return ilen > 12 ? -2 : -1;
    long long v = 0;
    for (size_t i = 0; i < ilen; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    v *= 1000;
    if (dot) {
        const char *f = dot + 1;
        size_t flen = strlen(f);
        if (flen == 0 || flen > 3) return -1;
        long long scale = 100;
        for (size_t i = 0; i < flen; i++, scale /= 10) {
            if (!isdigit((unsigned char)f[i])) return -1;
            v += (f[i] - '0') * scale;
        }
    }
    *ms = v;
    return 0;
}

static int parse_bool(const char *s, int *b) {
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (!strcmp(s, yes[i])) return *b = 1, 0;
        if (!strcmp(s, no[i])) return *b = 0, 0;
    }
    return -1;
}

static int parse_enum(const char *s, const char *choices) {
    int idx = 0;
    size_t n = strlen(s);
    for (const char *p = choices;; idx++) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, s, n)) return idx;
        if (!p[len]) return -1;
        p += len + 1;
    }
}

/* "a, b c" -> the bits of a and b in choices; "none" -> 0. -1 names an unknown word in
 * bad (or a repeated one). */
static int parse_words(const char *s, const char *choices, char *bad, size_t cap) {
    if (!strcmp(s, "none")) return 0;
    int bits = 0;
    for (const char *p = s;;) {
        p += strspn(p, ", \t");
        if (!*p) return bits;
        size_t n = strcspn(p, ", \t");
        snprintf(bad, cap, "%.*s", (int)n, p);
        int i = parse_enum(bad, choices);
        if (i < 0 || bits & (1 << i)) return -1;
        bits |= 1 << i;
        p += n;
    }
}

static int valid_name(const char *s) {
    if (!*s || strlen(s) > 64 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-') return 0;
    return 1;
}

static int valid_env_name(const char *s) {
    if (!*s || isdigit((unsigned char)*s)) return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_') return 0;
    return 1;
}

int ds_tee_check(const char *tee, ds_err *err) {
    if (!tee || !*tee) return ds_err_set(err, "'': expected all, none or a list of ranks like 0,2-3");
    if (!strcmp(tee, "all") || !strcmp(tee, "none")) return 0;
    const char *p = tee;
    for (;;) {
        long long a, b;
        char num[24];
        size_t n = strcspn(p, ",-");
        if (n == 0 || n >= sizeof num) goto bad;
        memcpy(num, p, n), num[n] = '\0';
        if (parse_llong(num, &a) != 0 || a < 0 || a > INT_MAX) goto bad;
        p += n;
        if (*p == '-') {
            p++;
            n = strcspn(p, ",-");
            if (n == 0 || n >= sizeof num) goto bad;
            memcpy(num, p, n), num[n] = '\0';
            if (parse_llong(num, &b) != 0 || b < 0 || b > INT_MAX) goto bad;
            if (b < a) return ds_err_set(err, "'%s': range %lld-%lld runs backwards", tee, a, b);
            p += n;
        }
        if (*p == '\0') return 0;
        if (*p != ',') goto bad;
        p++;
    }
bad:
    return ds_err_set(err, "'%s': expected all, none or a list of ranks like 0,2-3", tee);
}

int ds_tee_selects(const char *tee, int r) {
    if (!tee || !strcmp(tee, "all")) return 1;
    if (!strcmp(tee, "none")) return 0;
    const char *p = tee;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p) return 0;
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            p = end;
        }
        if (r >= a && r <= b) return 1;
        if (*p == ',') p++;
        else break;
    }
    return 0;
}

/* Splits a shell-style word list: blanks separate words; '...' is literal; "..." honours
 * \" \\ \$ \` and a backslash-newline; outside quotes a backslash escapes the next
 * character. Returns 0, or -1 with why set. */
static int split_args(const char *s, char ***out, int *nout, const char **why) {
    size_t cap = strlen(s) + 1;
    char **argv = calloc(cap + 1, sizeof *argv); /* at most one word per two characters */
    char *word = malloc(cap);
    int n = 0;
    if (!argv || !word) {
        free(argv);
        free(word);
        *why = "out of memory";
        return -1;
    }
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        size_t len = 0;
        while (*p && *p != ' ' && *p != '\t') {
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q) goto unterminated;
                memcpy(word + len, p + 1, (size_t)(q - p - 1));
                len += (size_t)(q - p - 1);
                p = q + 1;
            } else if (*p == '"') {
                p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && p[1] && strchr("\"\\$`", p[1])) p++;
                    word[len++] = *p++;
                }
                if (*p != '"') goto unterminated;
                p++;
            } else if (*p == '\\') {
                if (!p[1]) {
                    *why = "a trailing backslash escapes nothing";
                    goto fail;
                }
                word[len++] = p[1];
                p += 2;
            } else {
                word[len++] = *p++;
            }
        }
        word[len] = '\0';
        argv[n] = strdup(word);
        if (!argv[n]) {
            *why = "out of memory";
            goto fail;
        }
        n++;
    }
    free(word);
    *out = argv;
    *nout = n;
    return 0;
unterminated:
    *why = "unterminated quote";
fail:
    for (int i = 0; i < n; i++) free(argv[i]);
    free(argv);
    free(word);
    return -1;
}

static void free_words(char ***v, int *n) {
    for (int i = 0; *v && i < *n; i++) free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

static void free_args(ds_jobspec *spec) { free_words(&spec->args, &spec->nargs); }

/* "TERM, USR1" (commas or spaces, SIG prefix optional) or "none" -> mask of 1 << signo. */
static int parse_signals(const char *s, int *mask) {
    static const struct { const char *name; int sig; } SIGS[] = {
        {"TERM", SIGTERM}, {"HUP", SIGHUP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}};
    *mask = 0;
    if (!strcmp(s, "none")) return 0;
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t') p++;
        if (!*p) break;
        size_t n = strcspn(p, ", \t");
        const char *w = p;
        if (n > 3 && !strncmp(w, "SIG", 3)) w += 3, n -= 3;
        int found = 0;
        for (size_t i = 0; i < sizeof SIGS / sizeof SIGS[0]; i++)
            if (strlen(SIGS[i].name) == n && !strncmp(w, SIGS[i].name, n)) *mask |= 1 << SIGS[i].sig, found = 1;
        if (!found) return -1;
        p = w + n;
    }
    return *mask ? 0 : -1;
}

/* ---- init / free ---- */

void ds_jobspec_init(ds_jobspec *spec) {
    memset(spec, 0, sizeof *spec);
    spec->args = calloc(1, sizeof *spec->args);
    spec->dsrun = default_dsrun();
    spec->num_nodes = -1;
    spec->num_gpus = -1;
    spec->local_slots = -1;
    spec->device = DS_DEVICE_AUTO;
    spec->host_key_check = -1; /* [ssh]: unset, see jobspec.h */
    spec->rdzv_port = 0;
    spec->rdzv_timeout_ms = 300000;
    spec->max_handshakes = 64;
    spec->relay_threshold = 256;
    spec->master_port = 0; /* a free port on rank 0's node, found when the job starts */
    spec->max_restarts = 0;
    spec->heartbeat_interval_ms = 5000;
    spec->heartbeat_timeout_ms = 30000;
    spec->node_retries = 2;
    spec->backoff_ms = 1000;
    spec->backoff_max_ms = 60000;
    spec->drain_signals = 1 << SIGTERM | 1 << SIGUSR1 | 1 << SIGUSR2;
    spec->drain_timeout_ms = 120000;
    spec->notify_timeout_ms = 5000;
    spec->log_dir = strdup("logs");
    spec->tee = strdup("all");
    spec->log_mode = 0700;
    spec->ckpt_mode = 0700;
    ds_engine_opts_init(&spec->engine);
    spec->monitor_outputs = DS_MONITOR_JSONL | DS_MONITOR_TENSORBOARD | DS_MONITOR_REPORT | DS_MONITOR_PROGRESS;
    spec->steps_per_print = 10;
    spec->metrics_port = -1;
}

void ds_jobspec_free(ds_jobspec *spec) {
    if (!spec) return;
    char **strs[] = {&spec->path, &spec->name, &spec->script, &spec->workdir, &spec->dsrun,
                     &spec->hostfile, &spec->include, &spec->exclude, &spec->ssh_user,
                     &spec->ssh_identity, &spec->ssh_known_hosts, &spec->ssh_config,
                     &spec->rdzv_addr, &spec->log_dir, &spec->tee, &spec->metrics_addr,
                     &spec->webhook, &spec->deepspeed_config};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) set_str(strs[i], NULL);
    free_args(spec);
    free_words(&spec->interpreter, &spec->ninterp);
    for (int i = 0; i < spec->nenv; i++) {
        free(spec->env[i].key);
        free(spec->env[i].value);
    }
    free(spec->env);
    spec->env = NULL;
    spec->nenv = 0;
}

/* ---- parsing ---- */

typedef struct parse_state {
    ds_jobspec *spec;
    const char *name; /* file name for messages */
    char *base;       /* absolute directory of the file */
    const char *p;    /* reader position */
    int line;         /* line the reader last returned */
    int err_line;     /* first error we found (0: none) */
    ds_err *err;
    int key_line[NKEYS];
    int engine_line[DS_EO_COUNT];
    int ds_config_line; /* of [engine] deepspeed_config */
    int *env_line;    /* line of each [env] entry */
    int job_line;     /* line of the [job] header */
} parse_state;

static int fail(parse_state *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parse_state *st, const char *fmt, ...) {
    if (st->err_line) return 0; /* keep the first error */
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    st->err_line = st->line ? st->line : -1;
    if (st->line) ds_err_set(st->err, "%s:%d: %s", st->name, st->line, msg);
    else ds_err_set(st->err, "%s: %s", st->name, msg); /* a --set: no line */
    return 0; /* inih: handler failed */
}

static int known_section(const char *s) {
    for (int i = 0; i < NSECTIONS; i++)
        if (!strcmp(s, SECTIONS[i])) return 1;
    return 0;
}

/* "job, resources, ...": the sections, for messages. */
static const char *section_list(void) {
    static char list[256];
    if (!list[0])
        for (int i = 0; i < NSECTIONS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", SECTIONS[i]);
    return list;
}

static const char *type_expect(const key_def *k, char *buf, size_t cap) {
    switch (k->type) {
    case K_STR: return "a non-empty value";
    case K_NAME: return "a name of letters, digits, '.', '_' or '-' (at most 64)";
    case K_PATH: return "a path";
    case K_ABSPATH: return "an absolute path";
    case K_ARGS: return "arguments";
    case K_COMMAND: return "a program and its arguments";
    case K_INTERP: return "a program and its arguments, e.g. python3 -u";
    case K_INT:
    case K_LLONG: snprintf(buf, cap, "an integer in %lld..%lld", k->lo, k->hi); return buf;
    case K_SECONDS:
        snprintf(buf, cap, "seconds (up to 3 decimals) in %g..%g", k->lo / 1000.0, k->hi / 1000.0);
        return buf;
    case K_BOOL: return "true or false";
    case K_ENUM: snprintf(buf, cap, "one of %s", k->choices); return buf;
    case K_TEE: return "all, none or a list of ranks like 0,2-3";
    case K_WORDS: snprintf(buf, cap, "none, or some of %s separated by commas", k->choices); return buf;
    case K_URL: return "an http:// or https:// URL";
    case K_MODE: return "octal permission bits that keep the owner's rwx, 0700..0777 (e.g. 0750)";
    case K_SIGNALS: return "none, or signal names among TERM, HUP, USR1, USR2 (e.g. TERM, USR1)";
    }
    return "?";
}

static int set_env(parse_state *st, const char *key, const char *value) {
    ds_jobspec *spec = st->spec;
    if (!valid_env_name(key))
        return fail(st, "[env] %s: not a valid environment variable name "
                        "(expected letters, digits and '_', not starting with a digit)", key);
    if (ds_env_reserved(key))
        return fail(st, "[env] %s: set by dslaunch for every rank; it cannot be overridden", key);
    for (int i = 0; i < spec->nenv; i++)
        if (!strcmp(spec->env[i].key, key))
            return fail(st, "[env] %s: given twice (first on line %d)", key, st->env_line[i]);
    ds_env_var *ne = realloc(spec->env, (size_t)(spec->nenv + 1) * sizeof *ne);
    int *nl = realloc(st->env_line, (size_t)(spec->nenv + 1) * sizeof *nl);
    if (ne) spec->env = ne;
    if (nl) st->env_line = nl;
    if (!ne || !nl) return fail(st, "out of memory");
    spec->env[spec->nenv].key = strdup(key);
    spec->env[spec->nenv].value = strdup(value);
    st->env_line[spec->nenv] = st->line;
    spec->nenv++;
    if (!spec->env[spec->nenv - 1].key || !spec->env[spec->nenv - 1].value)
        return fail(st, "out of memory");
    return 1;
}

static int set_key(parse_state *st, int ki, const char *value) {
    const key_def *k = &KEYS[ki];
    ds_jobspec *spec = st->spec;
    char *field = (char *)spec + k->off;
    char buf[128];
    const char *what = type_expect(k, buf, sizeof buf);
    if (!*value && !(k->flags & ALLOW_EMPTY))
        return fail(st, "[%s] %s: empty value, expected %s", k->section, k->key, what);
    long long v;
    int rc, b;
    switch (k->type) {
    case K_STR:
        set_str((char **)field, *value ? strdup(value) : NULL);
        return 1;
    case K_NAME:
        if (!valid_name(value))
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        set_str((char **)field, strdup(value));
        return 1;
    case K_PATH: {
        char *e = expand_home(value);
        /* relative paths are relative to the job spec, except the log directory, which
         * is relative to workdir (the controller joins it) */
        if (e && e[0] != '/' && strcmp(k->key, "dir") != 0) {
            char *abs = path_join(st->base, e);
            free(e);
            e = abs;
        }
        set_str((char **)field, e);
        return 1;
    }
    case K_ABSPATH:
        if (value[0] != '/')
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        set_str((char **)field, strdup(value));
        return 1;
    case K_ARGS: {
        char **argv;
        int n;
        const char *why;
        if (split_args(value, &argv, &n, &why) != 0)
            return fail(st, "[%s] %s: %s", k->section, k->key, why);
        free_args(spec);
        spec->args = argv;
        spec->nargs = n;
        return 1;
    }
    case K_COMMAND:
    case K_INTERP: {
        char **argv;
        int n;
        const char *why;
        if (split_args(value, &argv, &n, &why) != 0)
            return fail(st, "[%s] %s: %s", k->section, k->key, why);
        if (n == 0 || !argv[0][0]) {
            for (int i = 0; i < n; i++) free(argv[i]);
            free(argv);
            return fail(st, "[%s] %s: empty value, expected %s", k->section, k->key, what);
        }
        if (k->type == K_INTERP) {
            free_words(&spec->interpreter, &spec->ninterp);
            spec->interpreter = argv;
            spec->ninterp = n;
            return 1;
        }
        /* the program goes to script, the rest to args */
        set_str(&spec->script, argv[0]);
        memmove(argv, argv + 1, (size_t)n * sizeof *argv); /* the NULL moves too */
        free_args(spec);
        spec->args = argv;
        spec->nargs = n - 1;
        return 1;
    }
    case K_INT:
    case K_LLONG:
        rc = parse_llong(value, &v);
        if (rc == -1) return fail(st, "[%s] %s: '%s' is not an integer; expected %s", k->section, k->key, value, what);
        if (rc == -2 || v < k->lo || v > k->hi)
            return fail(st, "[%s] %s: %s is out of range; expected %s", k->section, k->key, value, what);
        if (k->type == K_INT) *(int *)field = (int)v;
        else *(long long *)field = v;
        return 1;
    case K_SECONDS:
        rc = parse_seconds_ms(value, &v);
        if (rc == -1) return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        if (rc == -2 || v < k->lo || v > k->hi)
            return fail(st, "[%s] %s: %s is out of range; expected %s", k->section, k->key, value, what);
        *(int *)field = (int)v;
        return 1;
    case K_BOOL:
        if (parse_bool(value, &b) != 0)
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        *(int *)field = b;
        return 1;
    case K_ENUM:
        rc = parse_enum(value, k->choices);
        if (rc < 0) return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        *(int *)field = rc;
        return 1;
    case K_TEE: {
        ds_err e;
        if (ds_tee_check(value, &e) != 0) return fail(st, "[%s] %s: %s", k->section, k->key, e.msg);
        set_str((char **)field, strdup(value));
        return 1;
    }
    case K_WORDS: {
        char word[64];
        rc = parse_words(value, k->choices, word, sizeof word);
        if (rc < 0) return fail(st, "[%s] %s: '%s' is unknown or repeated; expected %s", k->section, k->key, word, what);
        *(int *)field = rc;
        return 1;
    }
    case K_MODE: {
        char *end;
        long m = strtol(value, &end, 8);
        if (*end || value[0] != '0' || strlen(value) < 3 || m < 0700 || m > 0777)
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        *(int *)field = (int)m;
        return 1;
    }
    case K_URL:
        if (strncmp(value, "http://", 7) && strncmp(value, "https://", 8))
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        set_str((char **)field, strdup(value));
        return 1;
    case K_SIGNALS:
        if (parse_signals(value, &b) != 0)
            return fail(st, "[%s] %s: '%s': expected %s", k->section, k->key, value, what);
        *(int *)field = b;
        return 1;
    }
    return fail(st, "internal: bad key type");
}

/* An [engine] key: the option table parses and checks it. */
static int set_engine_key(parse_state *st, const char *key, const char *value) {
    if (!strcmp(key, "deepspeed_config")) { /* a path, not an option: launcher/ds_config.c */
        if (st->ds_config_line)
            return fail(st, "[engine] deepspeed_config: given twice (first on line %d)", st->ds_config_line);
        st->ds_config_line = st->line;
        if (!*value) return fail(st, "[engine] deepspeed_config: empty value, expected a path");
        char *e = expand_home(value);
        if (e && e[0] != '/') {
            char *abs = path_join(st->base, e);
            free(e);
            e = abs;
        }
        set_str(&st->spec->deepspeed_config, e);
        return 1;
    }
    const ds_engine_opt *o = ds_engine_opt_keyed(key);
    if (!o) {
        char known[600] = "";
        size_t len = 0;
        for (int i = 0; i < DS_EO_COUNT && len < sizeof known - 40; i++)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "",
                                    DS_ENGINE_OPTS[i].key);
        return fail(st, "[engine] %s: unknown key (expected one of: %s, deepspeed_config)", key, known);
    }
    int i = (int)(o - DS_ENGINE_OPTS);
    if (st->engine_line[i])
        return fail(st, "[engine] %s: given twice (first on line %d)", key, st->engine_line[i]);
    st->engine_line[i] = st->line;
    char why[400];
    if (ds_engine_opt_parse(o, value, &st->spec->engine, why, sizeof why) != 0)
        return fail(st, "[engine] %s: %s", key, why);
    st->spec->engine_given[i] = 1;
    return 1;
}

static int on_key(void *user, const char *section, const char *key, const char *value) {
    parse_state *st = user;
    if (st->err_line) return 1; /* already failed: only the first error is reported */
    if (!*section) return fail(st, "%s: key outside any section (start with a [section])", key);
    if (!strcmp(section, "env")) return set_env(st, key, value);
    if (!strcmp(section, "engine")) return set_engine_key(st, key, value);
    for (int i = 0; i < NKEYS; i++) {
        if (strcmp(KEYS[i].section, section) || strcmp(KEYS[i].key, key)) continue;
        if (st->key_line[i])
            return fail(st, "[%s] %s: given twice (first on line %d)", section, key, st->key_line[i]);
        st->key_line[i] = st->line;
        if (KEYS[i].off == offsetof(ds_jobspec, steps_per_print)) st->spec->steps_per_print_given = 1;
        return set_key(st, i, value);
    }
    /* list the section's keys so the fix is in the message */
    char known[512] = "";
    size_t len = 0;
    for (int i = 0; i < NKEYS && len < sizeof known - 40; i++)
        if (!strcmp(KEYS[i].section, section))
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", KEYS[i].key);
    return fail(st, "[%s] %s: unknown key (expected one of: %s)", section, key, known);
}

/* inih's reader: one line per call, left-trimmed, counted; checks section names. */
static char *read_line(char *str, int num, void *stream) {
    parse_state *st = stream;
    if (!*st->p || st->err_line) return NULL;
    const char *eol = strchr(st->p, '\n');
    size_t len = eol ? (size_t)(eol - st->p) : strlen(st->p);
    const char *s = st->p;
    st->p = eol ? eol + 1 : s + len;
    st->line++;
    if (st->line == 1 && len >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3)) s += 3, len -= 3; /* BOM */
    while (len && (*s == ' ' || *s == '\t')) s++, len--;
    if (len + 2 > (size_t)num) {
        fail(st, "line longer than %d characters (inih's limit)", num - 2);
        return NULL;
    }
    memcpy(str, s, len);
    str[len] = '\n';
    str[len + 1] = '\0';
    if (len && str[0] == '[') {
        const char *close = memchr(str, ']', len);
        if (close) {
            char name[64];
            size_t n = (size_t)(close - str - 1);
            snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), str + 1);
            if (n >= sizeof name || !known_section(name)) {
                fail(st, "[%.*s]: unknown section (expected one of: %s)", (int)(n > 60 ? 60 : n), str + 1,
                     section_list());
                return NULL;
            }
            if (!strcmp(name, "job") && !st->job_line) st->job_line = st->line;
        }
    }
    return str;
}

/* The later of the lines that gave keys k1 and k2 (0 for a key not given). */
static int later_line(const parse_state *st, const char *k1, const char *k2) {
    int l1 = 0, l2 = 0;
    for (int i = 0; i < NKEYS; i++) {
        if (!strcmp(KEYS[i].key, k1)) l1 = st->key_line[i];
        if (!strcmp(KEYS[i].key, k2)) l2 = st->key_line[i];
    }
    return l1 > l2 ? l1 : l2;
}

/* An error of check_whole at line (0: not from a line of the file, e.g. a --set). */
static int whole_err(parse_state *st, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int whole_err(parse_state *st, int line, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0) return ds_err_set(st->err, "%s:%d: %s", st->name, line, msg);
    return ds_err_set(st->err, "%s: %s", st->name, msg);
}

/* Checks that need the whole file: required keys and keys that depend on each other. */
static int check_whole(parse_state *st) {
    ds_jobspec *spec = st->spec;
    if (!spec->name || !spec->script) {
        const char *key = !spec->name ? "name" : "script";
        if (!st->job_line)
            return whole_err(st, 0, "[job] %s: required key missing (there is no [job] section)", key);
        return whole_err(st, st->job_line, "[job] %s: required key missing%s", key,
                         spec->name ? " (or command)" : "");
    }
    int command = later_line(st, "command", "command"), other = later_line(st, "script", "args");
    if (command && other)
        return whole_err(st, command > other ? command : other, "[job] command names the program and its arguments: give it, or "
                         "script and args, not both");
    if (spec->ninterp && ds_jobspec_is_lua(spec))
        return whole_err(st, later_line(st, "interpreter", "interpreter"),
                         "[job] interpreter: %s is a Lua script, which dsrun runs itself; an "
                         "interpreter is for other programs", spec->script);
    if (spec->include && spec->exclude)
        return whole_err(st, later_line(st, "include", "exclude"),
                         "[resources] include and exclude are mutually exclusive");
    if ((spec->include || spec->exclude) && (spec->num_nodes != -1 || spec->num_gpus != -1))
        return whole_err(st, later_line(st, "num_nodes", "num_gpus"),
                         "[resources] num_nodes/num_gpus cannot be combined with include/exclude");
    const ds_engine_opt *a, *b;
    char why[400];
    if (ds_engine_opts_check(&spec->engine, &a, &b, why, sizeof why) != 0) {
        int la = st->engine_line[a - DS_ENGINE_OPTS], lb = st->engine_line[b - DS_ENGINE_OPTS];
        return whole_err(st, la > lb ? la : lb, "[engine] %s", why);
    }
    if (spec->heartbeat_timeout_ms <= spec->heartbeat_interval_ms)
        return whole_err(st, later_line(st, "heartbeat_timeout", "heartbeat_interval"),
                         "[restart] heartbeat_timeout (%g s) must be longer than heartbeat_interval (%g s)",
                         spec->heartbeat_timeout_ms / 1000.0, spec->heartbeat_interval_ms / 1000.0);
    return 0;
}

int ds_jobspec_parse(ds_jobspec *spec, const char *name, const char *text, ds_err *err) {
    ds_jobspec_init(spec);
    spec->path = strdup(name);
    parse_state st = {.spec = spec, .name = name, .p = text, .err = err};
    st.base = dir_of(name);
    if (!spec->path || !st.base || !spec->args) {
        free(st.base);
        ds_jobspec_free(spec);
        return ds_err_set(err, "%s: out of memory", name);
    }
    int rc = ini_parse_stream(read_line, &st, on_key, &st);
    if (rc > 0 && (!st.err_line || rc < st.err_line)) {
        ds_err_set(err, "%s:%d: syntax error: expected [section], key = value, or a comment "
                        "(; or #)", name, rc);
        rc = -1;
    } else if (rc < 0) {
        ds_err_set(err, "%s: out of memory", name);
    } else if (st.err_line) {
        rc = -1;
    } else {
        rc = check_whole(&st);
    }
    if (rc == 0 && !spec->workdir) {
        spec->workdir = strdup(st.base);
        if (!spec->workdir) rc = ds_err_set(err, "%s: out of memory", name);
    }
    free(st.base);
    free(st.env_line);
    if (rc != 0) {
        ds_jobspec_free(spec);
        return -1;
    }
    return 0;
}

int ds_jobspec_load(ds_jobspec *spec, const char *path, ds_err *err) {
    memset(spec, 0, sizeof *spec);
    char *buf = ds_textfile_read(path, "the job spec", 64u << 20, err);
    if (!buf) return -1;
    int rc = ds_jobspec_parse(spec, path, buf, err);
    free(buf);
    return rc;
}

int ds_jobspec_is_lua(const ds_jobspec *spec) {
    const char *s = spec->script;
    /* a URL's name ends before its #sha256= */
    size_t n = !s ? 0 : !strncmp(s, "http://", 7) || !strncmp(s, "https://", 8) ? strcspn(s, "#?") : strlen(s);
    return n > 4 && !strncmp(s + n - 4, ".lua", 4);
}

/* Drops [env] KEY, so that a --set of it replaces the file's value. */
static void unset_env(ds_jobspec *spec, const char *key) {
    for (int i = 0; i < spec->nenv; i++) {
        if (strcmp(spec->env[i].key, key)) continue;
        free(spec->env[i].key);
        free(spec->env[i].value);
        memmove(&spec->env[i], &spec->env[i + 1], (size_t)(spec->nenv - i - 1) * sizeof *spec->env);
        spec->nenv--;
        return;
    }
}

/* One --set: "SECTION.KEY=VALUE" through the same handler as a line of the file. */
static int override_one(parse_state *st, const char *set) {
    const char *dot = strchr(set, '.'), *eq = strchr(set, '=');
    char section[64], key[256];
    if (!dot || !eq || dot > eq || dot == set || eq == dot + 1 || (size_t)(dot - set) >= sizeof section ||
        (size_t)(eq - dot - 1) >= sizeof key)
        return ds_err_set(st->err, "%s: expected SECTION.KEY=VALUE, e.g. engine.zero_stage=2", st->name);
    snprintf(section, sizeof section, "%.*s", (int)(dot - set), set);
    snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
    if (!known_section(section))
        return ds_err_set(st->err, "%s: [%s]: unknown section (expected one of: %s)", st->name, section,
                          section_list());
    if (!strcmp(section, "env")) unset_env(st->spec, key);
    on_key(st, section, key, eq + 1);
    return st->err_line ? -1 : 0;
}

int ds_jobspec_override(ds_jobspec *spec, const char *const *sets, int nsets, ds_err *err) {
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "/");
    parse_state st = {.spec = spec, .base = cwd, .err = err};
    int rc = 0;
    for (int i = 0; i < nsets && rc == 0; i++) {
        char origin[300];
        snprintf(origin, sizeof origin, "--set %.280s", sets[i]);
        st.name = origin;
        memset(st.key_line, 0, sizeof st.key_line); /* a --set replaces what the file gave */
        memset(st.engine_line, 0, sizeof st.engine_line);
        st.ds_config_line = 0;
        rc = override_one(&st, sets[i]);
    }
    st.name = "--set";
    if (rc == 0 && nsets > 0) rc = check_whole(&st) ? -1 : 0;
    free(st.env_line);
    return rc;
}
