/* Starting the local node's agent by fork/exec (no SSH): its stdin, stdout and stderr
 * are pipes to the controller, it leads its own session (so the terminal's Ctrl-C
 * reaches only the controller, which then stops the job in order). */
#ifndef DS_LOCAL_H
#define DS_LOCAL_H

#include <sys/types.h>

#include "ds_err.h"

typedef struct ds_local {
    pid_t pid;
    int in_fd;  /* agent's stdin (write end), -1 once closed */
    int out_fd; /* agent's stdout (read end), -1 at EOF */
    int err_fd; /* agent's stderr (read end), -1 at EOF */
} ds_local;

/* Runs argv[0] with argv; the three controller ends are non-blocking and close-on-exec. */
int ds_local_start(ds_local *l, char *const argv[], ds_err *err);

#endif
