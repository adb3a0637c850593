/* Placeholder until state checkpoints land. */
#include <stdio.h>

#include "subcommands.h"

int dsrun_ckpt_main(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsrun ckpt: not built yet\n");
    return 2;
}
