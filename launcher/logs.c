#include "logs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h"
#include "log_files.h"
#include "run_dir.h"

/* Rank files open at once, however many ranks (log_files.h). */
#define OPEN_LOG_FILES 64

typedef struct rank_stream {
    int file;        /* rank-R.out / .err in l->files; -1 once a write failed */
    ds_buf line;   /* the line being assembled for the terminal */
    long long lost;  /* bytes that did not reach the file */
    int why;         /* errno of the first failed write */
} rank_stream;

typedef struct rank_log {
    char tag[300];   /* "[host:rank] " */
    int show;        /* passes the tee filter */
    rank_stream s[2];
    char *tail[DS_LOG_TAIL_LINES]; /* ring of the last stderr lines */
    int tail_next, tail_n;
} rank_log;

struct ds_logs {
    rank_log *ranks;
    ds_log_files *files;
    int n;
    int warned;     /* warnings printed about lost logs */
    ds_buf term[2]; /* whole tagged lines for stdout / stderr, written once per call */
    void (*on_terminal)(void *ctx, int before);
    void *on_terminal_ctx;
};

int ds_logs_parse_tee(const char *tee, int world, unsigned char *show, ds_err *err) {
    int all = !tee || !tee[0] || !strcmp(tee, "all");
    memset(show, all ? 1 : 0, (size_t)world);
    if (all || !strcmp(tee, "none")) return 0;
    const char *p = tee;
    while (*p) {
        char *end;
        long a = strtol(p, &end, 10), b = a;
        if (end == p || a < 0) return ds_err_set(err, "logs.tee '%s': expected all, none or ranks like 0,2-3", tee);
        p = end;
        if (*p == '-') {
            b = strtol(p + 1, &end, 10);
            if (end == p + 1 || b < a) return ds_err_set(err, "logs.tee '%s': bad range", tee);
            p = end;
        }
        for (long r = a; r <= b && r < world; r++) show[r] = 1;
        if (*p == ',') p++;
        else if (*p) return ds_err_set(err, "logs.tee '%s': unexpected '%c'", tee, *p);
    }
    return 0;
}

static int open_rank(ds_logs *l, rank_log *rl, const char *dir, int rank, ds_err *err) {
    static const char *ext[2] = {"out", "err"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rank-%d.%s", dir, rank, ext[k]);
        if ((rl->s[k].file = ds_log_files_add(l->files, path, err)) < 0) return -1;
    }
    return 0;
}

ds_logs *ds_logs_open(const char *dir, const ds_plan *plan, const char *tee, int mode, ds_err *err) {
    ds_logs *l = calloc(1, sizeof *l);
    unsigned char *show = calloc((size_t)plan->world_size + 1, 1);
    if (!l || !show || !(l->ranks = calloc((size_t)plan->world_size, sizeof *l->ranks)) ||
        !(l->files = ds_log_files_new(OPEN_LOG_FILES, mode))) {
        ds_err_set(err, "out of memory");
        goto fail;
    }
    l->n = plan->world_size;
    for (int r = 0; r < l->n; r++) l->ranks[r].s[0].file = l->ranks[r].s[1].file = -1;
    if (ds_logs_parse_tee(tee, l->n, show, err) != 0 || ds_mkdir_p(dir, mode, err) != 0) goto fail;
    for (int r = 0; r < l->n; r++) {
        rank_log *rl = &l->ranks[r];
        const ds_plan_node *node = &plan->nodes[plan->ranks[r].node_rank];
        snprintf(rl->tag, sizeof rl->tag, "[%s:%d] ", node->host, r);
        rl->show = show[r];
        if (open_rank(l, rl, dir, r, err) != 0) goto fail;
    }
    free(show);
    return l;
fail:
    free(show);
    ds_logs_close(l);
    return NULL;
}

static void keep_tail(rank_log *rl, const unsigned char *p, size_t n) {
    size_t keep = n > 1000 ? 1000 : n;
    char *s = malloc(keep + 1);
    if (!s) return;
    if (keep) memcpy(s, p, keep);
    s[keep] = 0;
    free(rl->tail[rl->tail_next]);
    rl->tail[rl->tail_next] = s;
    rl->tail_next = (rl->tail_next + 1) % DS_LOG_TAIL_LINES;
    if (rl->tail_n < DS_LOG_TAIL_LINES) rl->tail_n++;
}

/* One terminal line: tag + bytes + newline, queued whole (flush_terminal writes it). */
static void show_line(ds_logs *l, rank_log *rl, int stream, const unsigned char *p, size_t n) {
    if (stream == 2) keep_tail(rl, p, n);
    if (!rl->show) return;
    ds_buf *t = &l->term[stream - 1];
    size_t before = t->len;
    if (ds_buf_put(t, rl->tag, strlen(rl->tag)) || ds_buf_put(t, p, n) || ds_buf_put(t, "\n", 1))
        t->len = before; /* out of memory: this line is lost on the terminal, not in the file */
}

/* Many lines in one write: a rank printing fast costs one syscall per chunk, not per line. */
static void flush_terminal(ds_logs *l) {
    int some = ds_buf_unread(&l->term[0]) || ds_buf_unread(&l->term[1]);
    if (some && l->on_terminal) l->on_terminal(l->on_terminal_ctx, 1);
    for (int k = 0; k < 2; k++) {
        if (!ds_buf_unread(&l->term[k])) continue;
        ds_write_all(k == 0 ? 1 : 2, ds_buf_head(&l->term[k]), ds_buf_unread(&l->term[k])); /* a closed terminal only loses the view */
        ds_buf_clear(&l->term[k]);
    }
    if (some && l->on_terminal) l->on_terminal(l->on_terminal_ctx, 0);
}

void ds_logs_on_terminal(ds_logs *l, void (*fn)(void *ctx, int before), void *ctx) {
    l->on_terminal = fn;
    l->on_terminal_ctx = ctx;
}

/* The bytes go to the file while it takes them; a full disk stops the file, not the job:
 * what does not fit is counted, and the first loss of each file is said on the terminal
 * (the terminal still shows the lines). */
static void write_file(ds_logs *l, int rank, int stream, rank_stream *s, const void *p, size_t n) {
    if (s->file >= 0 && ds_log_files_write(l->files, s->file, p, n) != 0) {
        s->why = errno ? errno : ENOSPC;
        s->file = -1; /* a full disk stops the file, not the job */
        if (l->warned++ < 4) {
            if (l->on_terminal) l->on_terminal(l->on_terminal_ctx, 1);
            fprintf(stderr, "dslaunch: warning: rank %d's %s log: %s; the rest of it is lost (the terminal "
                            "still shows it)\n", rank, stream == 1 ? "stdout" : "stderr", strerror(s->why));
            if (l->on_terminal) l->on_terminal(l->on_terminal_ctx, 0);
        }
    }
    if (s->file < 0) s->lost += (long long)n; /* a write that failed part way counts whole */
}

long long ds_logs_lost(const ds_logs *l, int rank, int stream) {
    if (!l || rank < 0 || rank >= l->n || (stream != 1 && stream != 2)) return 0;
    return l->ranks[rank].s[stream - 1].lost;
}

void ds_logs_write(ds_logs *l, int rank, int stream, const void *p, size_t n) {
    if (!l || rank < 0 || rank >= l->n || (stream != 1 && stream != 2)) return;
    rank_log *rl = &l->ranks[rank];
    rank_stream *s = &rl->s[stream - 1];
    write_file(l, rank, stream, s, p, n);
    const unsigned char *b = p;
    while (n > 0) {
        const unsigned char *nl = memchr(b, '\n', n);
        size_t take = nl ? (size_t)(nl - b) : n;
        if (ds_buf_unread(&s->line) + take > DS_LOG_LINE_MAX) take = DS_LOG_LINE_MAX - ds_buf_unread(&s->line);
        if (ds_buf_put(&s->line, b, take) != 0) return;
        b += take;
        n -= take;
        int end_of_line = n > 0 && *b == '\n';
        if (end_of_line || ds_buf_unread(&s->line) >= DS_LOG_LINE_MAX) {
            show_line(l, rl, stream, ds_buf_head(&s->line), ds_buf_unread(&s->line));
            ds_buf_clear(&s->line);
            if (end_of_line) {
                b++;
                n--;
            }
        }
    }
    flush_terminal(l);
}

void ds_logs_end_rank(ds_logs *l, int rank) {
    if (!l || rank < 0 || rank >= l->n) return;
    rank_log *rl = &l->ranks[rank];
    for (int k = 0; k < 2; k++) {
        ds_buf *line = &rl->s[k].line;
        if (ds_buf_unread(line)) show_line(l, rl, k + 1, ds_buf_head(line), ds_buf_unread(line));
        ds_buf_clear(line);
    }
    flush_terminal(l);
}

int ds_logs_tail(const ds_logs *l, int rank, const char **lines) {
    if (!l || rank < 0 || rank >= l->n) return 0;
    const rank_log *rl = &l->ranks[rank];
    int start = (rl->tail_next - rl->tail_n + DS_LOG_TAIL_LINES) % DS_LOG_TAIL_LINES;
    for (int i = 0; i < rl->tail_n; i++) lines[i] = rl->tail[(start + i) % DS_LOG_TAIL_LINES];
    return rl->tail_n;
}

void ds_logs_close(ds_logs *l) {
    if (!l) return;
    for (int r = 0; l->ranks && r < l->n; r++) {
        rank_log *rl = &l->ranks[r];
        for (int k = 0; k < 2; k++) ds_buf_free(&rl->s[k].line);
        for (int i = 0; i < DS_LOG_TAIL_LINES; i++) free(rl->tail[i]);
    }
    free(l->ranks);
    ds_log_files_free(l->files);
    ds_buf_free(&l->term[0]);
    ds_buf_free(&l->term[1]);
    free(l);
}
