/* What one rank knows about itself and the job. Filled by `dsrun worker` from the
 * environment the agent gives it, or by `dsrun run` as a world of one; the parts that
 * join the job (comm) take it, and Lua bindings reach it through ds_context_of(L)
 * (luabind/ds_lua.h). */
#ifndef DS_CONTEXT_H
#define DS_CONTEXT_H

struct ds_store_client; /* runtime/store/store_client.h; NULL in `dsrun run` */
struct ds_comm;         /* runtime/comm/comm.h; NULL while the world is one rank */

typedef struct ds_context {
    int rank, world_size;
    int local_rank, local_world_size;
    int node_rank;
    int attempt;             /* DS_ATTEMPT: restart count, 0 first */
    char job_id[128];        /* DS_JOB_ID */
    char host[256];          /* this node's name as the plan calls it */
    struct ds_store_client *store;
    /* A second client of the same store for the communicator's watch thread (a client
     * is not thread-safe): NULL in a world of one or where nobody opened it. */
    struct ds_store_client *watch_store;
    struct ds_comm *comm;
} ds_context;

/* A world of one, as `dsrun run` uses. */
void ds_context_single(ds_context *ctx);

#endif
