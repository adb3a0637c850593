/* Wire protocol of the rendezvous store, shared by the client (runtime/store) and the
 * server (launcher/store_server.c). One request, one response, in order.
 *
 *   frame    = u32 len (big-endian, counts the bytes after it) | u8 op-or-status | body
 *   AUTH     = u32 version | 64 token bytes           (must be the first frame)
 *   SET      = u32 klen | key | value (rest of frame)
 *   GET      = i32 timeout_ms (-1: forever) | key (rest)     -> OK value | TIMEOUT
 *   ADD      = i64 delta | key (rest)                         -> OK i64 new value
 *   WAIT     = i32 timeout_ms | u32 nkeys | (u32 klen | key)* -> OK | TIMEOUT
 *   CHECK    = u32 nkeys | (u32 klen | key)*                  -> OK u8 all-exist
 *   DELETE   = key (rest)                                     -> OK u8 deleted
 *   HEARTBEAT= u32 node_rank                                  -> OK
 *   TAGGED   = u32 tag | u8 op | that op's body    -> TAGGED u32 tag | u8 status | body
 *   CANCEL   = (only inside TAGGED) drops the tag's waiting GET or WAIT; no answer
 *   BARRIER  = i32 timeout_ms | u32 world | u32 n | u32 rank * n | name (rest)
 *              -> OK once all world ranks arrived | TIMEOUT | ERROR text
 *              n = 0 asks, answered at once: OK u32 arrived | u32 missing | u32 rank * (the
 *              first DS_STORE_BARRIER_LISTED missing ranks)
 *   response status: OK (body as above), TIMEOUT (empty), ERROR (message text).
 *
 * TAGGED is how an agent multiplexes its node's ranks on its one connection
 * (runtime/agent/store_mux.c): requests with different tags are independent, so one
 * rank's blocked GET never holds another's request back, and answers come as they are
 * ready, each with its tag. A tagged request the server finds malformed is answered
 * ERROR (the connection stays: it carries other ranks). A connection the server will not
 * serve (wrong token, too many connections) gets an ERROR answer to its AUTH, then is
 * closed.
 *
 * Keys are 1..DS_STORE_MAX_KEY bytes without NUL; values 0..DS_STORE_MAX_VALUE bytes.
 * ADD keeps its counter as decimal text, so GET of a counter returns e.g. "12". */
#ifndef DS_STORE_PROTO_H
#define DS_STORE_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ds_buf.h"
#include "ds_err.h"

#define DS_STORE_VERSION 1
#define DS_STORE_MAX_KEY 4096                 /* bytes */
#define DS_STORE_MAX_VALUE (64u << 20)        /* 64 MiB */
#define DS_STORE_MAX_KEYS 1024                /* keys in one WAIT or CHECK */
#define DS_STORE_MAX_BARRIER_WORLD (1 << 22)  /* ranks of one BARRIER */
#define DS_STORE_BARRIER_LISTED 16            /* missing ranks a BARRIER status lists */
/* Largest frame: a SET of the largest key and value; WAIT/CHECK of MAX_KEYS keys of
 * MAX_KEY bytes would be 4 MiB, far below. */
#define DS_STORE_MAX_FRAME (DS_STORE_MAX_VALUE + DS_STORE_MAX_KEY + 64)
#define DS_STORE_AUTH_FRAME (1 + 4 + 64)      /* the only frame length accepted before AUTH */

enum ds_store_op {
    DS_STORE_OP_AUTH = 1,
    DS_STORE_OP_SET,
    DS_STORE_OP_GET,
    DS_STORE_OP_ADD,
    DS_STORE_OP_WAIT,
    DS_STORE_OP_CHECK,
    DS_STORE_OP_DELETE,
    DS_STORE_OP_HEARTBEAT,
    DS_STORE_OP_TAGGED,
    DS_STORE_OP_CANCEL,
    DS_STORE_OP_BARRIER,
    DS_STORE_NOPS = 16, /* ops are below this (the server counts requests by op) */
};

enum ds_store_status {
    DS_STORE_OK = 0,
    DS_STORE_TIMEOUT = 1,
    DS_STORE_ERROR = 2,
    DS_STORE_TAGGED = 3, /* u32 tag | u8 status | body: the answer to a TAGGED request */
};

/* Starts a frame (placeholder length + op) / patches its length once the body is in.
 * start is where the frame began as an offset into b's unread bytes (ds_buf_unread
 * before ds_frame_begin): the buffer may move its bytes while the body is added. */
int ds_frame_begin(ds_buf *b, uint8_t op);
void ds_frame_end(ds_buf *b, size_t start);

/* Reads fields out of a received body; each returns -1 when the body is too short. */
typedef struct ds_reader {
    const uint8_t *p;
    size_t n;
} ds_reader;

int ds_rd_u8(ds_reader *r, uint8_t *v);
int ds_rd_u32(ds_reader *r, uint32_t *v);
int ds_rd_u64(ds_reader *r, uint64_t *v);
int ds_rd_bytes(ds_reader *r, size_t n, const uint8_t **p);

uint32_t ds_load_u32(const uint8_t *p);
void ds_store_u32(uint8_t *p, uint32_t v);

/* NULL when the key is acceptable, else what is wrong with it. */
const char *ds_store_key_problem(const uint8_t *key, size_t len);

#endif
