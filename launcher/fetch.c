#include "fetch.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_proto.h"
#include "run_dir.h"

#define FETCH_DIR ".dslaunch-files"
#define FETCH_TIMEOUT_S 600L

/* Where the URL starts in s ("https://..." or "key=https://..."), or NULL. */
static const char *url_in(const char *s) {
    const char *eq = strchr(s, '=');
    const char *cands[2] = {s, eq ? eq + 1 : NULL};
    for (int i = 0; i < 2; i++)
        if (cands[i] && (!strncmp(cands[i], "http://", 7) || !strncmp(cands[i], "https://", 8))) return cands[i];
    return NULL;
}

int ds_fetch_is_url(const char *s) { return url_in(s) != NULL; }

static int sha256_file(const char *path, char hex[65], size_t *size, ds_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return ds_err_errno(err, errno, "%s", path);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        fclose(f);
        EVP_MD_CTX_free(ctx);
        return ds_err_set(err, "sha256: cannot start");
    }
    unsigned char buf[65536], md[32];
    size_t n, total = 0;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        EVP_DigestUpdate(ctx, buf, n);
        total += n;
    }
    int bad = ferror(f);
    fclose(f);
    unsigned mdlen = 0;
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    if (bad) return ds_err_set(err, "%s: read error", path);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    *size = total;
    return 0;
}

static const char *cache_root(void) {
    static char root[4096];
    const char *x = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (x && x[0] == '/') snprintf(root, sizeof root, "%s/dslaunch/sha256", x);
    else snprintf(root, sizeof root, "%s/.cache/dslaunch/sha256", home && home[0] ? home : "/tmp");
    return root;
}

static int download(const char *url, const char *path, ds_err *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ds_err_errno(err, errno, "%s", path);
    CURL *c = curl_easy_init();
    if (!c) {
        fclose(f);
        return ds_err_set(err, "%s: cannot start libcurl", url);
    }
    char msg[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, FETCH_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, msg);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    if (fclose(f) != 0 && rc == CURLE_OK) return ds_err_errno(err, errno, "%s", path);
    if (rc != CURLE_OK) return ds_err_set(err, "%s: fetch failed: %s", url, msg[0] ? msg : curl_easy_strerror(rc));
    return 0;
}

/* Fetches (unless cached) and verifies one URL#sha256=HEX into f. */
static int fetch_one(ds_fetched *f, const char *text, ds_err *err) {
    const char *frag = strstr(text, "#sha256=");
    if (!frag)
        return ds_err_set(err, "%s: a URL must carry the SHA-256 of what it names (...#sha256=<64 hex digits>)", text);
    size_t hexlen = strlen(frag + 8);
    for (size_t i = 0; i < hexlen; i++)
        if (!strchr("0123456789abcdefABCDEF", frag[8 + i])) hexlen = 0;
    if (hexlen != 64) return ds_err_set(err, "%s: expected 64 hex digits after #sha256=", text);
    for (int i = 0; i < 64; i++) f->sha[i] = (char)(frag[8 + i] | 0x20); /* lower case */
    f->sha[64] = 0;
    if (!(f->url = strndup(text, (size_t)(frag - text)))) return ds_err_set(err, "out of memory");
    const char *base = strrchr(f->url, '/');
    base = base && base[1] && base > strstr(f->url, "//") + 1 ? base + 1 : "file";
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(base, "?"), base);
    if (!name[0] || name[0] == '.') snprintf(name, sizeof name, "file");
    if (asprintf(&f->relpath, FETCH_DIR "/%s/%s", f->sha, name) < 0 ||
        asprintf(&f->cached, "%s/%s", cache_root(), f->sha) < 0) {
        f->relpath = f->cached = NULL;
        return ds_err_set(err, "out of memory");
    }
    char have[65];
    if (access(f->cached, R_OK) == 0 && sha256_file(f->cached, have, &f->size, err) == 0 && !strcmp(have, f->sha))
        return 0; /* fetched before */
    if (ds_mkdir_p(cache_root(), 0700, err) != 0) return -1;
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.4200s.part-%d", f->cached, (int)getpid());
    if (download(f->url, tmp, err) != 0 || sha256_file(tmp, have, &f->size, err) != 0) {
        unlink(tmp);
        return -1;
    }
    if (strcmp(have, f->sha) != 0) {
        unlink(tmp);
        return ds_err_set(err, "%s: SHA-256 mismatch: the URL says %s, the %zu bytes fetched hash to %s", f->url,
                          f->sha, f->size, have);
    }
    if (rename(tmp, f->cached) != 0) {
        int e = errno;
        unlink(tmp);
        return ds_err_errno(err, e, "rename %s", tmp);
    }
    return 0;
}

/* s with its URL part replaced by f's relpath (key= kept). */
static char *rewritten(const char *s, const ds_fetched *f) {
    const char *u = url_in(s);
    char *out;
    if (asprintf(&out, "%.*s%s", (int)(u - s), s, f->relpath) < 0) return NULL;
    return out;
}

static int resolve_one(ds_fetch_set *fs, const char *s, char **out, ds_err *err) {
    const char *u = url_in(s);
    if (!u) {
        *out = strdup(s);
        return *out ? 0 : ds_err_set(err, "out of memory");
    }
    ds_fetched *grown = realloc(fs->files, (size_t)(fs->nfiles + 1) * sizeof *grown);
    if (!grown) return ds_err_set(err, "out of memory");
    fs->files = grown;
    ds_fetched *f = &fs->files[fs->nfiles++];
    memset(f, 0, sizeof *f);
    if (fetch_one(f, u, err) != 0) return -1;
    *out = rewritten(s, f);
    return *out ? 0 : ds_err_set(err, "out of memory");
}

int ds_fetch_resolve(ds_fetch_set *fs, const char *script, char *const *args, int nargs, ds_err *err) {
    memset(fs, 0, sizeof *fs);
    if (!(fs->args = calloc((size_t)nargs + 1, sizeof *fs->args))) return ds_err_set(err, "out of memory");
    if (resolve_one(fs, script, &fs->script, err) != 0) return ds_err_prefix(err, "[job] script");
    for (int i = 0; i < nargs; i++) {
        if (resolve_one(fs, args[i], &fs->args[i], err) != 0) return ds_err_prefix(err, "[job] args");
        fs->nargs++;
    }
    return 0;
}

static int copy_file(const char *from, const char *to, ds_err *err) {
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%.4200s.part-%d", to, (int)getpid());
    int in = open(from, O_RDONLY | O_CLOEXEC), out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = in < 0 || out < 0 ? ds_err_errno(err, errno, "copying %s to %s", from, tmp) : 0;
    char buf[65536];
    ssize_t n;
    while (rc == 0 && (n = read(in, buf, sizeof buf)) != 0)
        if (n < 0 || ds_write_all(out, buf, (size_t)n) != 0) rc = ds_err_errno(err, errno, "copying to %s", tmp);
    if (in >= 0) close(in);
    if (out >= 0 && close(out) != 0 && rc == 0) rc = ds_err_errno(err, errno, "%s", tmp);
    if (rc == 0 && rename(tmp, to) != 0) rc = ds_err_errno(err, errno, "rename %s", tmp);
    if (rc != 0) unlink(tmp);
    return rc;
}

int ds_fetch_place(const ds_fetch_set *fs, const char *workdir, ds_err *err) {
    for (int i = 0; i < fs->nfiles; i++) {
        const ds_fetched *f = &fs->files[i];
        char path[4200], dir[4200];
        snprintf(path, sizeof path, "%s/%s", workdir, f->relpath);
        snprintf(dir, sizeof dir, "%s", path);
        *strrchr(dir, '/') = 0;
        struct stat st;
        if (stat(path, &st) == 0 && (size_t)st.st_size == f->size) continue; /* already there */
        if (ds_mkdir_p(dir, 0755, err) != 0 || copy_file(f->cached, path, err) != 0) return -1;
    }
    return 0;
}

int ds_fetch_queue(const ds_fetch_set *fs, ds_buf *out, ds_err *err) {
    for (int i = 0; i < fs->nfiles; i++) {
        const ds_fetched *f = &fs->files[i];
        char head[1024];
        int n = snprintf(head, sizeof head, "%s\n%zu", f->relpath, f->size);
        if (ds_frame_append(out, DS_FRAME_FILE, 0, head, (size_t)n) != 0) return ds_err_set(err, "out of memory");
        int fd = open(f->cached, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return ds_err_errno(err, errno, "%s", f->cached);
        static char chunk[1 << 20];
        ssize_t got;
        size_t sent = 0;
        while ((got = read(fd, chunk, sizeof chunk)) > 0) {
            if (ds_frame_append(out, DS_FRAME_FILE_DATA, 0, chunk, (size_t)got) != 0) {
                close(fd);
                return ds_err_set(err, "out of memory");
            }
            sent += (size_t)got;
        }
        close(fd);
        if (got < 0 || sent != f->size) return ds_err_set(err, "%s: changed while it was being sent", f->cached);
    }
    return 0;
}

void ds_fetch_free(ds_fetch_set *fs) {
    for (int i = 0; i < fs->nfiles; i++) {
        free(fs->files[i].url);
        free(fs->files[i].relpath);
        free(fs->files[i].cached);
    }
    free(fs->files);
    free(fs->script);
    for (int i = 0; fs->args && i < fs->nargs; i++) free(fs->args[i]);
    free(fs->args);
    memset(fs, 0, sizeof *fs);
}
