/* How a relay reaches a node over SSH, as the controller worked it out (ssh_target.h:
 * the job spec's [ssh] keys and the ssh configuration of the controller's machine), sent
 * in the node's RELAY_NODE frame: "ssh", then key=value lines (the command, the target,
 * then each ProxyJump hop after a "jump" line). The relay needs the same key files and
 * known_hosts at the same paths (docs/scale.md#relays). */
#ifndef DS_RELAY_OPTS_H
#define DS_RELAY_OPTS_H

#include "ds_buf.h"
#include "ds_err.h"
#include "ssh.h"

/* Appends the payload for o and command; -1 when a value holds a newline or memory ran out. */
int ds_relay_opts_put(ds_buf *b, const ds_ssh_opts *o, const char *command);
/* Reads a payload back into o (free with ds_ssh_opts_free) and *command (malloc'd). */
int ds_relay_opts_get(const char *p, size_t len, ds_ssh_opts *o, char **command, ds_err *err);

#endif
