#include "knownhosts.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *key_name(int type) {
    switch (type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA: return "ssh-rsa";
    case LIBSSH2_HOSTKEY_TYPE_DSS: return "ssh-dss";
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: return "ecdsa-sha2-nistp256";
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: return "ecdsa-sha2-nistp384";
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: return "ecdsa-sha2-nistp521";
    case LIBSSH2_HOSTKEY_TYPE_ED25519: return "ssh-ed25519";
    default: return "unknown-key-type";
    }
}

static int key_bits(int type) {
    switch (type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA: return LIBSSH2_KNOWNHOST_KEY_SSHRSA;
    case LIBSSH2_HOSTKEY_TYPE_DSS: return LIBSSH2_KNOWNHOST_KEY_SSHDSS;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: return LIBSSH2_KNOWNHOST_KEY_ECDSA_256;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: return LIBSSH2_KNOWNHOST_KEY_ECDSA_384;
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: return LIBSSH2_KNOWNHOST_KEY_ECDSA_521;
    case LIBSSH2_HOSTKEY_TYPE_ED25519: return LIBSSH2_KNOWNHOST_KEY_ED25519;
    default: return LIBSSH2_KNOWNHOST_KEY_UNKNOWN;
    }
}

void ds_hostkey_fingerprint(LIBSSH2_SESSION *session, char *out, size_t cap) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *h = (const unsigned char *)libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256);
    if (!h) {
        snprintf(out, cap, "SHA256:?");
        return;
    }
    char s[64] = "SHA256:";
    size_t o = strlen(s);
    for (int i = 0; i < 32; i += 3) { /* unpadded, like ssh-keygen */
        unsigned v = (unsigned)h[i] << 16 | (i + 1 < 32 ? (unsigned)h[i + 1] << 8 : 0) | (i + 2 < 32 ? h[i + 2] : 0);
        int nout = i + 2 < 32 ? 4 : i + 1 < 32 ? 3 : 2;
        for (int k = 0; k < nout; k++) s[o++] = b64[(v >> (18 - 6 * k)) & 63];
    }
    s[o] = 0;
    snprintf(out, cap, "%s", s);
}

static void host_entry(const char *host, int port, char *out, size_t cap) {
    if (port == 22) snprintf(out, cap, "%s", host);
    else snprintf(out, cap, "[%s]:%d", host, port);
}

static int append_key(LIBSSH2_KNOWNHOSTS *kh, const char *host, int port, const char *key,
                      size_t len, int type, const char *path, ds_err *err) {
    char name[512];
    host_entry(host, port, name, sizeof name);
    struct libssh2_knownhost *entry = NULL;
    if (libssh2_knownhost_addc(kh, name, NULL, key, len, NULL, 0,
                               LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | key_bits(type),
                               &entry) != 0)
        return ds_err_set(err, "cannot record the host key of %s", name);
    char line[8192];
    size_t outlen = 0;
    if (libssh2_knownhost_writeline(kh, entry, line, sizeof line, &outlen, LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0)
        return ds_err_set(err, "cannot format the host key of %s", name);
    FILE *f = fopen(path, "a");
    if (!f && errno == ENOENT) { /* a first connection: ~/.ssh may not exist yet */
        char dir[4200];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = '\0';
            if (mkdir(dir, 0700) == 0 || errno == EEXIST) f = fopen(path, "a");
        }
        if (!f) errno = ENOENT;
    }
    if (!f) {
        int e = errno;
        libssh2_knownhost_del(kh, entry);
        return ds_err_errno(err, e, "accept-new: cannot add %s's key to %s", name, path);
    }
    int ok = fwrite(line, 1, outlen, f) == outlen;
    ok &= fclose(f) == 0;
    if (ok) return 0;
    int e = errno;
    libssh2_knownhost_del(kh, entry); /* not in the file: a later session tries again */
    return ds_err_errno(err, e, "writing %s", path);
}

/* The files, read once per controller run: a job of N nodes would otherwise read them N
 * times (N^2 lines in all, the files growing with the nodes). Kept per list of files (the
 * ssh config may name other files for some hosts), in a collection owned by a session of
 * its own that never connects; what accept-new adds goes into it too, so a later session
 * of this run finds that key as one reading the file again would. */
typedef struct kept {
    char *files; /* the list, NUL-separated */
    size_t len;
    LIBSSH2_SESSION *owner;
    LIBSSH2_KNOWNHOSTS *kh;
} kept;

static kept *kept_lists;
static int nkept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

/* The list as one key: the names, each with its NUL. malloc'd; NULL when out of memory. */
static char *list_key(const char *const *files, int nfiles, size_t *len) {
    size_t n = 0;
    for (int i = 0; i < nfiles; i++) n += strlen(files[i]) + 1;
    char *key = malloc(n ? n : 1), *p = key;
    for (int i = 0; key && i < nfiles; i++) p = stpcpy(p, files[i]) + 1;
    *len = n;
    return key;
}

static void drop(kept *k) {
    if (k->kh) libssh2_knownhost_free(k->kh);
    if (k->owner) libssh2_session_free(k->owner);
    free(k->files);
}

static LIBSSH2_KNOWNHOSTS *read_files(const char *const *files, int nfiles, ds_err *err) {
    kept k = {0};
    if (!(k.files = list_key(files, nfiles, &k.len))) return ds_err_set(err, "out of memory"), NULL;
    for (int i = 0; i < nkept; i++)
        if (kept_lists[i].len == k.len && !memcmp(kept_lists[i].files, k.files, k.len)) {
            free(k.files);
            return kept_lists[i].kh;
        }
    kept *ks = realloc(kept_lists, (size_t)(nkept + 1) * sizeof *ks);
    if (ks) kept_lists = ks;
    if (!ks || !(k.owner = libssh2_session_init()) || !(k.kh = libssh2_knownhost_init(k.owner))) {
        drop(&k);
        return ds_err_set(err, "out of memory"), NULL;
    }
    for (int i = 0; i < nfiles; i++) {
        if (access(files[i], F_OK) != 0 ||
            libssh2_knownhost_readfile(k.kh, files[i], LIBSSH2_KNOWNHOST_FILE_OPENSSH) >= 0)
            continue;
        drop(&k);
        return ds_err_set(err, "cannot read known_hosts file %s", files[i]), NULL;
    }
    kept_lists[nkept++] = k;
    return k.kh;
}

static int verify(LIBSSH2_SESSION *session, const char *host, int port, const char *const *files, int nfiles,
                  ds_hostkey_check mode, ds_err *err) {
    size_t len;
    int type;
    const char *key = libssh2_session_hostkey(session, &len, &type);
    if (!key) return ds_err_set(err, "%s:%d sent no host key", host, port);
    char fp[64], name[512];
    ds_hostkey_fingerprint(session, fp, sizeof fp);
    host_entry(host, port, name, sizeof name);
    if (nfiles < 1) return ds_err_set(err, "no known_hosts file to check %s against", name);
    const char *known_hosts = files[0]; /* where accept-new writes */
    LIBSSH2_KNOWNHOSTS *kh = read_files(files, nfiles, err);
    if (!kh) return -1;
    /* As OpenSSH: an entry names port 22 as "host" and any other port as "[host]:port",
     * and only that. (Given the port, libssh2 1.10 also accepts a plain "host" entry for
     * any port; given the entry's own name and no port, it matches that name alone,
     * hashed entries included.) */
    struct libssh2_knownhost *found = NULL;
    int rc = libssh2_knownhost_checkp(kh, name, -1, key, len,
                                      LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | key_bits(type),
                                      &found);
    int ret = 0;
    if (rc == LIBSSH2_KNOWNHOST_CHECK_MATCH) {
        ret = 0;
    } else if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
        ret = ds_err_set(err,
                         "host key of %s has CHANGED: it now offers %s %s, which does not match %s. "
                         "This may be an attack or a reinstalled node; if you know the new key is "
                         "right, remove the old line (ssh-keygen -R '%s' -f %s) and run again",
                         name, key_name(type), fp, known_hosts, name, known_hosts);
    } else if (rc == LIBSSH2_KNOWNHOST_CHECK_NOTFOUND && mode == DS_HOSTKEY_ACCEPT_NEW) {
        ret = append_key(kh, host, port, key, len, type, known_hosts, err);
    } else if (rc == LIBSSH2_KNOWNHOST_CHECK_NOTFOUND) {
        ret = ds_err_set(err,
                         "host key of %s is unknown (%s %s, not in %s). Check the fingerprint "
                         "and add the key (ssh-keyscan -p %d %s >> %s), or set "
                         "host_key_check = accept-new in [ssh] (StrictHostKeyChecking "
                         "accept-new in ~/.ssh/config)",
                         name, key_name(type), fp, known_hosts, port, host, known_hosts);
    } else {
        ret = ds_err_set(err, "cannot check the host key of %s against %s", name, known_hosts);
    }
    return ret;
}

int ds_knownhosts_verify(LIBSSH2_SESSION *session, const char *host, int port,
                         const char *const *files, int nfiles, ds_hostkey_check mode, ds_err *err) {
    if (mode == DS_HOSTKEY_NO) return 0;
    pthread_mutex_lock(&kept_lock);
    int rc = verify(session, host, port, files, nfiles, mode, err);
    pthread_mutex_unlock(&kept_lock);
    return rc;
}
