/* A rank whose program is not Lua (program.c). */
#ifndef DS_WORKER_PROGRAM_H
#define DS_WORKER_PROGRAM_H

/* Runs argv[0..argc) (looked up in PATH when it has no '/') as the worker's child and
 * exits as it did. */
int ds_worker_exec(int argc, char **argv);

#endif
