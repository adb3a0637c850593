/* Placeholder until the controller (start, supervise, stop) lands. */
#include <stdio.h>

#include "controller.h"

int ds_controller_run(const ds_jobspec *spec, const ds_plan *plan) {
    (void)plan;
    fprintf(stderr, "dslaunch: %s: starting ranks is not built yet (use --dry-run)\n",
            spec->path ? spec->path : "job");
    return 1;
}
