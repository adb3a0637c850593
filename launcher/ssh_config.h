/* OpenSSH client configuration files (~/.ssh/config, or [ssh] config), read the way
 * ssh(1) reads them for what dslaunch uses: Host blocks with patterns (`*`, `?`, `!`),
 * Match all / host / originalhost / localuser, Include (globs, relative to ~/.ssh), and the
 * keywords HostName, User, Port, IdentityFile, IdentitiesOnly, ProxyJump,
 * StrictHostKeyChecking, UserKnownHostsFile, ConnectTimeout and ServerAliveInterval.
 * For each keyword the first value found for a host wins (IdentityFile adds up), as in
 * ssh. Other keywords are skipped, except those that would make the connection differ
 * from what dslaunch does (ProxyCommand, ...): a host they apply to is an error naming
 * the file and line. See docs/running.md#ssh-configuration. */
#ifndef DS_SSH_CONFIG_H
#define DS_SSH_CONFIG_H

#include "ds_err.h"

typedef struct ds_ssh_config ds_ssh_config;

/* What the configuration says about one host; unset fields are NULL, 0 or -1. */
typedef struct ds_ssh_host {
    char *hostname;       /* HostName, %h expanded */
    char *user;
    int port;             /* 0: not given */
    char **identity_files; /* every IdentityFile, in order, ~ and % tokens not yet expanded */
    int nidentity;
    int identities_only;  /* -1: not given */
    char *proxy_jump;     /* as written; NULL: not given or "none" */
    int strict;           /* -1: not given; else a ds_hostkey_check */
    char **known_hosts;   /* UserKnownHostsFile's files, unexpanded */
    int nknown;
    int connect_timeout_ms; /* 0: not given */
    int alive_interval_s;   /* -1: not given; 0: off */
    char where[300];      /* "FILE:LINE" of the HostName given, for messages ("" if none) */
} ds_ssh_host;

/* Reads path (and what it includes). A missing file is an empty configuration when
 * must_exist is 0. Syntax errors name FILE:LINE. Warnings (a Match criterion dslaunch
 * cannot evaluate: that block is skipped) are kept for ds_ssh_config_warnings. */
ds_ssh_config *ds_ssh_config_load(const char *path, int must_exist, ds_err *err);
/* Same from text (tests); name is used in messages, includes are relative to ~/.ssh. */
ds_ssh_config *ds_ssh_config_parse(const char *name, const char *text, ds_err *err);
/* Newline-separated warnings, "" when none. */
const char *ds_ssh_config_warnings(const ds_ssh_config *c);
void ds_ssh_config_free(ds_ssh_config *c);

/* What applies to host (the name as given: a hostfile entry, a ProxyJump hop). */
int ds_ssh_config_lookup(const ds_ssh_config *c, const char *host, ds_ssh_host *out, ds_err *err);
void ds_ssh_host_free(ds_ssh_host *h);

/* 1 when name matches an ssh pattern list ("a* !ab,c?" style: blanks or commas), as ssh
 * matches Host lines: a negated pattern that matches excludes; else any pattern. */
int ds_ssh_pattern_match(const char *patterns, const char *name);

#endif
