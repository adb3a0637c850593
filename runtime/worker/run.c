/* `dsrun run SCRIPT.lua [ARGS]`: one rank, no launcher, the quickest loop for a script's
 * author. */
#include <stdio.h>

#include "comm.h"
#include "rank_device.h"
#include "script.h"
#include "subcommands.h"

int dsrun_run_main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: dsrun run SCRIPT.lua [ARGS...]\n");
        return 2;
    }
    ds_context ctx;
    ds_context_single(&ctx);
    ds_err err = {{0}};
    if (ds_rank_open_device(&ctx, &err) != 0) {
        fprintf(stderr, "dsrun run: %s\n", err.msg);
        return 1;
    }
    int rc = ds_script_run(&ctx, argv[1], argc - 2, argv + 2);
    if (ds_rank_close_device(&err) != 0) {
        fprintf(stderr, "dsrun run: %s\n", err.msg);
        rc = 1;
    }
    ds_comm_close(ctx.comm); /* the world-of-one communicator, if the script made one */
    return rc;
}
