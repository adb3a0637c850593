/* Placeholder until the agent lands. */
#include <stdio.h>

#include "subcommands.h"

int dsrun_agent_main(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsrun agent: not built yet\n");
    return 2;
}

int dsrun_worker_main(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsrun worker: not built yet\n");
    return 2;
}
