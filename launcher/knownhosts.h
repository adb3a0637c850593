/* Host-key verification against OpenSSH known_hosts files (plain or hashed names,
 * "[host]:port" for ports other than 22), as `host_key_check` asks:
 *   yes         the key must be listed; unknown or changed keys are refused
 *   accept-new  an unknown host's key is appended to the first file (created, and its
 *               directory with mode 0700, when missing); a changed key is refused
 *   no          anything is accepted (tests, throwaway clusters)
 * A refusal names the host, the key type and SHA256 fingerprint, and what to do. */
#ifndef DS_KNOWNHOSTS_H
#define DS_KNOWNHOSTS_H

#include <libssh2.h>

#include "ds_err.h"
#include "jobspec.h"

/* The files are read once per process (per list of files): the first session reads
 * them, later ones check against what was read, plus what accept-new added since. */
int ds_knownhosts_verify(LIBSSH2_SESSION *session, const char *host, int port,
                         const char *const *files, int nfiles, ds_hostkey_check mode, ds_err *err);

/* "SHA256:<base64>" of the session's host key, as ssh-keygen -l prints it. */
void ds_hostkey_fingerprint(LIBSSH2_SESSION *session, char *out, size_t cap);

#endif
