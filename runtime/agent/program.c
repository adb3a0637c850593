/* How a node runs a program that is not Lua: which interpreter, decided on the node
 * itself (its files, its PATH), once for all its ranks. See agent.h and docs/running.md. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"

void ds_agent_free_words(char **words) {
    for (int i = 0; words && words[i]; i++) free(words[i]);
    free(words);
}

/* NULL-terminated copy of pre[0..npre) + post[0..npost). */
static char **join(char *const *pre, int npre, char *const *post, int npost) {
    char **v = calloc((size_t)(npre + npost + 1), sizeof *v);
    if (!v) return NULL;
    for (int i = 0; i < npre + npost; i++) {
        v[i] = strdup(i < npre ? pre[i] : post[i - npre]);
        if (!v[i]) {
            ds_agent_free_words(v);
            return NULL;
        }
    }
    return v;
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), t = strlen(tail);
    return n > t && !strcmp(s + n - t, tail);
}

/* The #! line of path as the kernel reads it: the interpreter, then at most one
 * argument (the rest of the line, trimmed). Returns the number of words (0: no #! line),
 * or -1 with errno. */
static int shebang(const char *path, char *interp, char *arg, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char line[256];
    ssize_t n = read(fd, line, sizeof line - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        errno = e;
        return -1;
    }
    line[n] = '\0';
    if (n < 2 || line[0] != '#' || line[1] != '!') return 0;
    line[strcspn(line, "\n")] = '\0';
    char *p = line + 2;
    p += strspn(p, " \t");
    size_t ilen = strcspn(p, " \t");
    if (ilen == 0 || ilen >= cap) return 0;
    snprintf(interp, cap, "%.*s", (int)ilen, p);
    p += ilen;
    p += strspn(p, " \t");
    size_t alen = strlen(p);
    while (alen && (p[alen - 1] == ' ' || p[alen - 1] == '\t' || p[alen - 1] == '\r')) alen--;
    if (alen == 0) return 1;
    snprintf(arg, cap, "%.*s", (int)alen, p);
    return 2;
}

char **ds_agent_program_argv(char *const *interp, int ninterp, const char *program,
                             char *const *args, int nargs, ds_err *err) {
    char **v = NULL;
    struct stat st;
    int is_file = strchr(program, '/') || stat(program, &st) == 0;
    if (ninterp > 0) {
        char **pre = calloc((size_t)ninterp + 1, sizeof *pre);
        if (pre) {
            memcpy(pre, interp, (size_t)ninterp * sizeof *pre);
            pre[ninterp] = (char *)program;
            v = join(pre, ninterp + 1, args, nargs);
            free(pre);
        }
    } else if (!is_file) {
        /* a command looked up in PATH when it runs (python3, torchrun, ...) */
        char *pre[] = {(char *)program};
        v = join(pre, 1, args, nargs);
    } else {
        char exe[4096], word1[4096], word2[4096];
        int nw = shebang(program, word1, word2, sizeof word1);
        if (nw < 0 || (nw == 0 && stat(program, &st) != 0))
            return ds_err_errno(err, errno, "cannot read the program %s", program), NULL;
        if (nw == 0 && S_ISDIR(st.st_mode))
            return ds_err_set(err, "the program %s is a directory", program), NULL;
        /* "./run.sh", not "run.sh": exec must not look a file of the workdir up in PATH */
        snprintf(exe, sizeof exe, "%s%s", strchr(program, '/') ? "" : "./", program);
        char *pre[3] = {word1, word2, exe};
        if (nw == 1) pre[1] = exe;
        if (nw > 0) {
            v = join(pre, nw + 1, args, nargs);
        } else if (access(program, X_OK) == 0) {
            v = join(pre + 2, 1, args, nargs);
        } else if (ends_with(program, ".py")) {
            char *py[] = {"python3", exe};
            v = join(py, 2, args, nargs);
        } else {
            return ds_err_set(err, "the program %s is not executable, has no #! line and is not a "
                                   ".py file: say what runs it with [job] interpreter (e.g. "
                                   "--set job.interpreter=bash)", program), NULL;
        }
    }
    if (!v) ds_err_set(err, "out of memory");
    return v;
}
