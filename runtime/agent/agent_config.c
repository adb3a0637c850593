/* The node's part of the plan, as the controller sends it on the agent's stdin: config,
 * fetched files (written into the workdir), and each rank's environment. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

static char *dup_n(const unsigned char *p, size_t n) {
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

static int parse_int(const char *v, int *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > 1000000000) return -1;
    *out = (int)x;
    return 0;
}

static int push_str(char ***arr, int *n, char *s) {
    char **a = realloc(*arr, sizeof *a * (size_t)(*n + 2));
    if (!a) return -1;
    a[(*n)++] = s;
    a[*n] = NULL;
    *arr = a;
    return 0;
}

static int set_config(ds_agent *a, const char *kv, ds_err *err) {
    const char *eq = strchr(kv, '=');
    if (!eq) return ds_err_set(err, "config frame without '=': %.64s", kv);
    size_t klen = (size_t)(eq - kv);
    const char *v = eq + 1;
    char **slot = NULL;
    int *num = NULL;
#define KEY(k) (klen == strlen(k) && !strncmp(kv, k, klen))
    if (KEY("job")) slot = &a->job;
    else if (KEY("host")) slot = &a->host;
    else if (KEY("rdzv")) slot = &a->rdzv;
    else if (KEY("token")) slot = &a->token;
    else if (KEY("workdir")) slot = &a->workdir;
    else if (KEY("script")) slot = &a->script;
    else if (KEY("link")) slot = &a->link;
    else if (KEY("node")) num = &a->node;
    else if (KEY("heartbeat_ms")) num = &a->heartbeat_ms;
    else if (KEY("grace_ms")) num = &a->grace_ms;
    else if (KEY("rdzv_timeout_ms")) num = &a->rdzv_timeout_ms;
    else if (KEY("attempt")) num = &a->attempt;
    else if (KEY("master_port")) num = &a->master_port;
    else if (KEY("local_rank_arg")) num = &a->local_rank_arg;
    else if (KEY("kind")) {
        if (strcmp(v, "lua") && strcmp(v, "program")) return ds_err_set(err, "config kind: '%s'", v);
        a->program = !strcmp(v, "program");
        return 0;
    } else if (KEY("progress_ms")) num = &a->progress_ms;
    else if (KEY("ckpt_mode")) num = &a->ckpt_mode;
    else if (KEY("arg") || KEY("interp")) {
        char *s = strdup(v);
        int rc = !s ? -1 : KEY("arg") ? push_str(&a->args, &a->nargs, s) : push_str(&a->interp, &a->ninterp, s);
        if (rc != 0) {
            free(s);
            return ds_err_set(err, "out of memory");
        }
        return 0;
    }
#undef KEY
    if (num) {
        if (parse_int(v, num) != 0) return ds_err_set(err, "config %.*s: bad number '%s'", (int)klen, kv, v);
        return 0;
    }
    if (!slot) return ds_err_set(err, "unknown config key '%.*s'", (int)klen, kv);
    free(*slot);
    *slot = strdup(v);
    return *slot ? 0 : ds_err_set(err, "out of memory");
}

/* A file the controller fetched (launcher/fetch.h): "<relpath>\n<bytes>", then its bytes
 * in FILE_DATA frames; written to a temporary name and renamed into place when whole, so
 * a node sharing the workdir with another never sees half a file. */
typedef struct incoming_file {
    int fd;
    char path[4096], tmp[4200];
    unsigned long long left;
} incoming_file;

static int mkdirs_for(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return 0;
}

static int file_done(incoming_file *in, ds_err *err) {
    int rc = fsync(in->fd) != 0 || close(in->fd) != 0 ? ds_err_errno(err, errno, "%s", in->tmp) : 0;
    in->fd = -1;
    if (rc == 0 && rename(in->tmp, in->path) != 0) rc = ds_err_errno(err, errno, "rename %s", in->tmp);
    if (rc != 0) unlink(in->tmp);
    return rc;
}

static int file_begin(ds_agent *a, incoming_file *in, const char *s, ds_err *err) {
    char rel[1024];
    unsigned long long size;
    if (in->fd >= 0) return ds_err_set(err, "a file began before the last one was whole");
    if (!a->workdir) return ds_err_set(err, "a file came before the workdir");
    if (sscanf(s, "%1023[^\n]\n%llu", rel, &size) != 2 || strncmp(rel, ".dslaunch-files/", 16) || strstr(rel, ".."))
        return ds_err_set(err, "bad file header '%.64s'", s);
    snprintf(in->path, sizeof in->path, "%s/%s", a->workdir, rel);
    snprintf(in->tmp, sizeof in->tmp, "%s.part-%d", in->path, (int)getpid());
    if (mkdirs_for(in->path) != 0) return ds_err_errno(err, errno, "mkdir for %s", in->path);
    in->fd = open(in->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (in->fd < 0) return ds_err_errno(err, errno, "%s", in->tmp);
    in->left = size;
    return in->left ? 0 : file_done(in, err);
}

static int file_data(incoming_file *in, const ds_frame *f, ds_err *err) {
    if (in->fd < 0 || f->len > in->left) return ds_err_set(err, "file data beyond the file's size");
    if (ds_write_all(in->fd, f->payload, f->len) != 0) {
        int e = errno;
        close(in->fd);
        in->fd = -1;
        unlink(in->tmp);
        return ds_err_errno(err, e, "%s", in->tmp);
    }
    in->left -= f->len;
    return in->left ? 0 : file_done(in, err);
}

static int apply_frame(ds_agent *a, const ds_frame *f, ds_err *err) {
    char *s = dup_n(f->payload, f->len);
    if (!s) return ds_err_set(err, "out of memory");
    if (f->type == DS_FRAME_CONFIG) {
        int rc = set_config(a, s, err);
        free(s);
        return rc;
    }
    if (f->type == DS_FRAME_RANK) {
        free(s);
        ds_agent_worker *w = realloc(a->workers, sizeof *w * (size_t)(a->nworkers + 1));
        if (!w) return ds_err_set(err, "out of memory");
        a->workers = w;
        memset(&w[a->nworkers], 0, sizeof *w);
        w[a->nworkers].rank = (int)f->rank;
        w[a->nworkers].out_fd = w[a->nworkers].err_fd = w[a->nworkers].metrics_fd = w[a->nworkers].rec_fd = -1;
        a->nworkers++;
        return 0;
    }
    if (f->type == DS_FRAME_ENV) {
        if (a->nworkers == 0 || a->workers[a->nworkers - 1].rank != (int)f->rank || !strchr(s, '=')) {
            free(s);
            return ds_err_set(err, "ENV frame for rank %u out of order", f->rank);
        }
        ds_agent_worker *w = &a->workers[a->nworkers - 1];
        if (push_str(&w->env, &w->nenv, s) != 0) {
            free(s);
            return ds_err_set(err, "out of memory");
        }
        return 0;
    }
    free(s);
    return ds_err_set(err, "unexpected frame type %d before GO", f->type);
}

int ds_agent_read_config(ds_agent *a, int fd, ds_err *err) {
    ds_buf in = {0};
    incoming_file file = {.fd = -1};
    int rc = -1;
    for (;;) {
        ds_frame f;
        int p = ds_frame_parse(&in, &f);
        if (p < 0) {
            ds_err_set(err, "malformed frame on stdin");
            break;
        }
        if (p == 0) {
            unsigned char buf[65536];
            ssize_t n = read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                ds_err_errno(err, errno, "reading the plan on stdin");
                break;
            }
            if (n == 0) {
                ds_err_set(err, "stdin closed before the plan was complete");
                break;
            }
            if (ds_buf_put(&in, buf, (size_t)n) != 0) {
                ds_err_set(err, "out of memory");
                break;
            }
            continue;
        }
        if (f.type == DS_FRAME_GO) {
            rc = ds_buf_unread(&in) == DS_FRAME_HEADER + f.len ? 0 : ds_err_set(err, "bytes after GO");
            if (rc == 0 && file.fd >= 0) rc = ds_err_set(err, "the plan ended inside a file");
            break;
        }
        if (f.type == DS_FRAME_FILE) {
            char head[1100];
            snprintf(head, sizeof head, "%.*s", (int)(f.len < 1099 ? f.len : 1099), (const char *)f.payload);
            if (file_begin(a, &file, head, err) != 0) break;
        } else if (f.type == DS_FRAME_FILE_DATA) {
            if (file_data(&file, &f, err) != 0) break;
        } else if (apply_frame(a, &f, err) != 0) {
            break;
        }
        ds_buf_consume(&in, DS_FRAME_HEADER + f.len);
    }
    ds_buf_free(&in);
    if (file.fd >= 0) {
        close(file.fd);
        unlink(file.tmp);
    }
    if (rc == 0 && (!a->job || !a->script || !a->workdir))
        rc = ds_err_set(err, "plan lacks job, script or workdir");
    return rc;
}

void ds_agent_free(ds_agent *a) {
    free(a->job);
    free(a->host);
    free(a->rdzv);
    if (a->token) memset(a->token, 0, strlen(a->token));
    free(a->token);
    free(a->workdir);
    free(a->script);
    free(a->link);
    for (int i = 0; i < a->nargs; i++) free(a->args[i]);
    free(a->args);
    for (int i = 0; i < a->ninterp; i++) free(a->interp[i]);
    free(a->interp);
    ds_agent_free_words(a->program_argv);
    for (int i = 0; i < a->nworkers; i++) {
        for (int j = 0; j < a->workers[i].nenv; j++) free(a->workers[i].env[j]);
        free(a->workers[i].env);
        free(a->workers[i].cgroup);
    }
    free(a->workers);
    free(a->cg_base);
    free(a->errdir);
}
