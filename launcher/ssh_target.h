/* How to reach a node over SSH, from the job spec's [ssh] keys and the user's ssh
 * configuration, the way ssh(1) combines its command line and ~/.ssh/config: a key the
 * job spec gives wins (for the destination, not its ProxyJump hosts), else the
 * configuration's first value, else the default (port 22, $USER, ssh-agent then
 * ~/.ssh/id_ed25519 / id_ecdsa / id_rsa, ~/.ssh/known_hosts, host keys checked, 10 s to
 * connect, keepalives every 5 s). docs/running.md#ssh-configuration. */
#ifndef DS_SSH_TARGET_H
#define DS_SSH_TARGET_H

#include "ds_err.h"
#include "jobspec.h"
#include "ssh.h"
#include "ssh_config.h"

/* The job's ssh configuration: [ssh] config (which must exist), else ~/.ssh/config
 * (none is fine). */
ds_ssh_config *ds_ssh_config_for(const ds_jobspec *spec, ds_err *err);

/* Fills out (free with ds_ssh_opts_free) for the host the hostfile names `name`,
 * ProxyJump hops included. */
int ds_ssh_target(const ds_jobspec *spec, const ds_ssh_config *cfg, const char *name, ds_ssh_opts *out,
                  ds_err *err);

/* The address name stands for: its HostName, else name itself (malloc'd). */
char *ds_ssh_target_host(const ds_ssh_config *cfg, const char *name, ds_err *err);

#endif
