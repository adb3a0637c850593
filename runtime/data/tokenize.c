/* Placeholder until the tokenizer lands. */
#include <stdio.h>

#include "subcommands.h"

int dsrun_tokenize_main(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "dsrun tokenize: not built yet\n");
    return 2;
}
