/* The byte stream between the controller and an agent (the agent's stdin and stdout,
 * over an SSH channel or local pipes). Everything is framed: a 9-byte header (type,
 * rank as u32 big-endian, payload length as u32 big-endian) and the payload. Worker
 * output travels as raw chunks tagged by rank and stream; lines are assembled by the
 * controller, so a chunk boundary never splits or mixes a line.
 *
 * Controller -> agent: CONFIG ("key=value") frames, FILE ("<path>\n<bytes>": a fetched
 * file the node gets, path relative to the workdir) each followed by FILE_DATA chunks
 * holding its bytes, then per rank a RANK frame and its ENV ("KEY=VALUE") frames, then
 * GO. Closing the agent's stdin means "stop the node":
 * TERM to every worker, KILL after the grace period, exit (the dead-man switch).
 * Agent -> controller: HELLO when its store connection is up, STARTED (payload: pid) per
 * worker, STDOUT/STDERR chunks, FAILURE (a rank's failure record, JSON, when it left
 * one: runtime/worker/failure_record.h) just before its EXIT (payload: "exit N at T" or
 * "signal N at T", T the wall-clock ms when the agent saw it end), ERROR (a message) when
 * the node cannot run, BYE just before it exits, METRICS chunks: what a worker wrote to
 * its metrics pipe (DS_METRICS_FD), one JSON object per line, assembled into lines by
 * the controller like output (launcher/metrics.h).
 *
 * Started by srun (docs/slurm.md), an agent shares its stdin with every agent of the
 * step: there stdin carries only CONFIG link= and token= frames and GO; the agent
 * connects to the link, sends JOIN ("TOKEN NODE PROCID JOBID.STEPID") and the exchange
 * above then runs over that connection. Such an agent also reports the signals it gets
 * (SIGNAL, payload: the number), which is how the scheduler's warnings reach the
 * controller.
 *
 * A relay (launcher/relay.h: `dslaunch --relay`, started where the controller would start
 * an agent) speaks the same framing for a share of the nodes: the controller sends it
 * CONFIG frames, a RELAY_NODE frame per node (rank: the node's index in the job; payload:
 * how to start its agent) and GO; then RELAY_IN (bytes for that node's agent's stdin)
 * and RELAY_EOF (close it). The relay answers HELLO (its pid), per node RELAY_OUT (one
 * whole frame its agent sent), RELAY_LINE (a line of its agent's stderr) and RELAY_DONE
 * (the agent is gone), and BYE when it ends in order. */
#ifndef DS_AGENT_PROTO_H
#define DS_AGENT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "ds_buf.h"

enum {
    DS_FRAME_CONFIG = 1,
    DS_FRAME_RANK = 2,
    DS_FRAME_ENV = 3,
    DS_FRAME_GO = 4,
    DS_FRAME_FILE = 5,
    DS_FRAME_FILE_DATA = 6,
    DS_FRAME_HELLO = 10,
    DS_FRAME_STARTED = 11,
    DS_FRAME_STDOUT = 12,
    DS_FRAME_STDERR = 13,
    DS_FRAME_EXIT = 14,
    DS_FRAME_ERROR = 15,
    DS_FRAME_BYE = 16,
    DS_FRAME_SIGNAL = 17,
    DS_FRAME_JOIN = 18,
    DS_FRAME_METRICS = 19,
    DS_FRAME_FAILURE = 20,
    DS_FRAME_RELAY_NODE = 21,
    DS_FRAME_RELAY_IN = 22,
    DS_FRAME_RELAY_EOF = 23,
    DS_FRAME_RELAY_OUT = 24,
    DS_FRAME_RELAY_LINE = 25,
    DS_FRAME_RELAY_DONE = 26,
};

#define DS_FRAME_HEADER 9
#define DS_FRAME_MAX_PAYLOAD (1u << 20)

/* Appends one frame to out. -1 when out of memory or the payload is too big. */
int ds_frame_append(ds_buf *out, int type, uint32_t rank, const void *payload, size_t len);

typedef struct ds_frame {
    int type;
    uint32_t rank;
    const unsigned char *payload; /* points into the input buffer; valid until consumed */
    size_t len;
} ds_frame;

/* Parses the frame at the start of in's unread bytes. Returns 1 and fills f (the frame takes
 * DS_FRAME_HEADER + f->len bytes, to consume after use), 0 when more bytes are needed,
 * -1 when the stream is malformed (unknown type or oversized payload). */
int ds_frame_parse(const ds_buf *in, ds_frame *f);

/* Writes all of buf to a blocking fd, retrying on EINTR. -1 with errno set on failure. */
int ds_write_all(int fd, const void *buf, size_t n);

#endif
