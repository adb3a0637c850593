/* One SSH session to a node, driven without blocking (libssh2 in non-blocking mode) so
 * the controller opens all nodes' sessions at once from one poll loop: TCP connect,
 * handshake, host-key check (knownhosts.h), public-key authentication (ssh-agent's keys,
 * then identity files), then one exec channel running the agent. Through ProxyJump hosts,
 * each hop's session runs over a direct-tcpip channel of the one before it (its bytes go
 * through libssh2's transport callbacks), all on the first hop's socket. The whole
 * opening is bounded by the connect timeout. libssh2 1.10 cannot send signals over a
 * channel: the node is stopped by closing the channel's stdin (the agent's dead-man
 * switch), see docs/running.md. */
#ifndef DS_SSH_H
#define DS_SSH_H

#include <stddef.h>
#include <sys/types.h>

#include "ds_err.h"
#include "jobspec.h"

/* How to reach one host (ssh_target.h fills it from the job spec and ssh config). */
typedef struct ds_ssh_opts {
    char *name;          /* the host as named (hostfile, ProxyJump), for messages */
    char *host;          /* the address to connect to (HostName, else name) */
    int port;
    char *user;
    int use_agent;       /* try ssh-agent's keys first (when SSH_AUTH_SOCK is set) */
    char **identities;   /* then these key files, in order */
    int nidentities;
    char **known_hosts;  /* checked in order; accept-new adds to the first */
    int nknown;
    ds_hostkey_check check;
    int timeout_ms;      /* connect + handshake + auth + exec, every hop together */
    int alive_interval_s; /* keepalive interval; 0: none */
    struct ds_ssh_opts *jumps; /* ProxyJump hosts, in order: jumps[0] is connected directly */
    int njumps;
} ds_ssh_opts;

void ds_ssh_opts_free(ds_ssh_opts *o);

typedef struct ds_ssh ds_ssh;

/* s in single quotes for the remote shell (malloc'd; NULL when out of memory). */
char *ds_shell_quote(const char *s);

/* Once per process, before any session. */
int ds_ssh_global_init(ds_err *err);

/* Starts connecting; the session then advances with ds_ssh_open_step. Takes what o holds
 * (o is left empty, whatever the outcome). */
ds_ssh *ds_ssh_start(ds_ssh_opts *o, const char *command, ds_err *err);

/* Advances the opening: 1 when the command runs, 0 to call again when the socket is
 * ready (ds_ssh_fd / ds_ssh_events) or at the deadline, -1 on error (err says which
 * host, which step and what to do). */
int ds_ssh_open_step(ds_ssh *s, ds_err *err);

int ds_ssh_fd(const ds_ssh *s);
short ds_ssh_events(const ds_ssh *s); /* poll events libssh2 waits for now */
long long ds_ssh_deadline_ms(const ds_ssh *s);

/* On the open channel. stream: 1 = stdout, 2 = stderr. Returns bytes read, 0 when
 * nothing is there now, -1 on error. */
ssize_t ds_ssh_read(ds_ssh *s, int stream, void *buf, size_t n);
/* Bytes written (0 when the channel cannot take more now), -1 on error. */
ssize_t ds_ssh_write(ds_ssh *s, const void *buf, size_t n);
/* Closes the command's stdin: 1 done, 0 call again, -1 error. */
int ds_ssh_send_eof(ds_ssh *s);
/* 1 when the command's stdout and stderr reached EOF and all was read. */
int ds_ssh_eof(ds_ssh *s);
/* Runs command on a second channel of the same session, without reading its output:
 * the fallback that stops a node whose agent no longer answers (libssh2 1.10 has no
 * channel signals). Call again with the same command while it returns 0; 1 = started,
 * -1 = error. */
int ds_ssh_exec_aux(ds_ssh *s, const char *command);
/* Sends a keepalive when due, so a dead link is noticed. */
void ds_ssh_keepalive(ds_ssh *s);
/* Last libssh2 error in words. */
const char *ds_ssh_last_error(ds_ssh *s);

/* Drops the session without waiting for anything. NULL is allowed. */
void ds_ssh_free(ds_ssh *s);

#endif
