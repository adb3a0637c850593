/* The NCCL backend (GPU ranks): rank 0 makes a fresh unique id per open (so per
 * attempt) and passes it through the store; ops are enqueued on the communicator's own
 * stream, after the work already queued on the legacy default stream, and a handle is
 * a CUDA event. The communicator is non-blocking (config.blocking = 0) so that init and
 * waits honour the timeout: past it the communicator is aborted and the op fails. */
#ifdef DS_HAVE_CUDA

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_backend.h"
#include "ds_clock.h"

typedef struct nccl_be {
    ncclComm_t comm;
    cudaStream_t stream;
    cudaEvent_t ready; /* recorded on the default stream before each op */
    int *scratch;      /* one device int, for the barrier */
    int timeout_ms;
    int aborted;
} nccl_be;

static void pause_briefly(void) {
    struct timespec ts = {0, 100000}; /* 0.1 ms between polls of the device */
    nanosleep(&ts, NULL);
}

static int cuda_fail(ds_err *err, cudaError_t e, const char *what) {
    return ds_err_set(err, "%s: %s", what, cudaGetErrorString(e));
}

static int nccl_fail(ds_err *err, ncclResult_t r, const char *what) {
    return ds_err_set(err, "%s: %s", what, ncclGetErrorString(r));
}

/* Polls the communicator until no call is in progress, aborting it past the deadline. */
static int nccl_settle(nccl_be *b, long long deadline, const char *what, ds_err *err) {
    for (;;) {
        ncclResult_t st;
        ncclResult_t r = ncclCommGetAsyncError(b->comm, &st);
        if (r != ncclSuccess) return nccl_fail(err, r, what);
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) {
            ncclCommAbort(b->comm);
            b->aborted = 1;
            return nccl_fail(err, st, what);
        }
        if (ds_now_ms() > deadline) {
            ncclCommAbort(b->comm);
            b->aborted = 1;
            return ds_err_set(err, "%s: timed out", what);
        }
        pause_briefly();
    }
}

static ncclDataType_t nccl_type(ds_dtype dt) {
    switch (dt) {
    case DS_F32: return ncclFloat32;
    case DS_BF16: return ncclBfloat16;
    case DS_F16: return ncclFloat16;
    case DS_I32: return ncclInt32;
    }
    return ncclFloat32;
}

static int nccl_run(void *be, ds_comm_handle *h, ds_err *err) {
    nccl_be *b = be;
    cudaError_t ce;
    if (b->aborted) return ds_err_set(err, "nccl: communicator was aborted");
    if ((ce = cudaEventRecord(b->ready, 0)) != cudaSuccess ||
        (ce = cudaStreamWaitEvent(b->stream, b->ready, 0)) != cudaSuccess)
        return cuda_fail(err, ce, "ordering after the default stream");
    ncclRedOp_t op = h->op == DS_COMM_AVG ? ncclAvg : ncclSum;
    ncclDataType_t t = nccl_type(h->dtype);
    ncclResult_t r = ncclSuccess;
    switch (h->kind) {
    case DS_COMM_OP_ALLREDUCE:
        r = ncclAllReduce(h->in, h->out, h->count, t, op, b->comm, b->stream);
        break;
    case DS_COMM_OP_REDUCE_SCATTER:
        r = ncclReduceScatter(h->in, h->out, h->count, t, op, b->comm, b->stream);
        break;
    case DS_COMM_OP_ALLGATHER:
        r = ncclAllGather(h->in, h->out, h->count, t, b->comm, b->stream);
        break;
    case DS_COMM_OP_BROADCAST:
        r = ncclBroadcast(h->in, h->out, h->count, t, h->root, b->comm, b->stream);
        break;
    case DS_COMM_OP_BARRIER:
        r = ncclAllReduce(b->scratch, b->scratch, 1, ncclInt32, ncclSum, b->comm, b->stream);
        break;
    }
    if (r != ncclSuccess && r != ncclInProgress) return nccl_fail(err, r, "nccl enqueue");
    if (nccl_settle(b, ds_now_ms() + b->timeout_ms, "nccl enqueue", err) != 0) return -1;
    cudaEvent_t ev;
    if ((ce = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess)
        return cuda_fail(err, ce, "creating the completion event");
    if ((ce = cudaEventRecord(ev, b->stream)) != cudaSuccess) {
        cudaEventDestroy(ev);
        return cuda_fail(err, ce, "recording the completion event");
    }
    h->backend_data = ev;
    return 0;
}

static int nccl_poll(void *be, ds_comm_handle *h) {
    (void)be;
    return cudaEventQuery((cudaEvent_t)h->backend_data) != cudaErrorNotReady;
}

/* Waits for the op's event, watching the communicator for a peer's failure. */
static int nccl_finish(void *be, ds_comm_handle *h, ds_err *err) {
    nccl_be *b = be;
    cudaEvent_t ev = h->backend_data;
    long long deadline = ds_now_ms() + b->timeout_ms;
    int rc = 0;
    for (;;) {
        cudaError_t ce = cudaEventQuery(ev);
        if (ce == cudaSuccess) break;
        if (ce != cudaErrorNotReady) {
            rc = cuda_fail(err, ce, "nccl op");
            break;
        }
        ncclResult_t st;
        if (ncclCommGetAsyncError(b->comm, &st) == ncclSuccess && st != ncclSuccess &&
            st != ncclInProgress) {
            ncclCommAbort(b->comm);
            b->aborted = 1;
            rc = nccl_fail(err, st, "nccl op");
            break;
        }
        if (ds_now_ms() > deadline) {
            ncclCommAbort(b->comm);
            b->aborted = 1;
            rc = ds_err_set(err, "nccl op: timed out after %d ms", b->timeout_ms);
            break;
        }
        pause_briefly();
    }
    cudaEventDestroy(ev);
    return rc;
}

static void nccl_close(void *be) {
    nccl_be *b = be;
    if (b->comm) {
        if (b->aborted) ncclCommAbort(b->comm);
        else ncclCommDestroy(b->comm);
    }
    if (b->scratch) cudaFree(b->scratch);
    if (b->ready) cudaEventDestroy(b->ready);
    if (b->stream) cudaStreamDestroy(b->stream);
    free(b);
}

static const ds_comm_vtable nccl_vtable = {
    .backend = DS_COMM_NCCL,
    .threaded = 0,
    .native_avg = 1,
    .run = nccl_run,
    .finish = nccl_finish,
    .poll = nccl_poll,
    .close = nccl_close,
};

/* Rank 0's fresh id reaches every rank through the store. */
static int share_unique_id(const ds_comm_join *j, ncclUniqueId *id, ds_err *err) {
    char key[256];
    snprintf(key, sizeof key, "%snccl_id", j->prefix);
    if (j->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(id);
        if (r != ncclSuccess) return nccl_fail(err, r, "ncclGetUniqueId");
        return ds_store_set(j->store, key, id, sizeof *id, err);
    }
    void *val = NULL;
    size_t len = 0;
    if (ds_store_get(j->store, key, &val, &len, j->timeout_ms, err) != 0) return -1;
    int rc = 0;
    if (len != sizeof *id) rc = ds_err_set(err, "%s: %zu bytes, expected %zu", key, len, sizeof *id);
    else memcpy(id, val, sizeof *id);
    free(val);
    return rc;
}

void *ds_comm_nccl_open(const ds_comm_join *j, const ds_comm_vtable **vt, ds_err *err) {
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev == 0) {
        ds_err_set(err, "nccl: no CUDA device (%s)", cudaGetErrorString(ce));
        return NULL;
    }
    nccl_be *b = calloc(1, sizeof *b);
    if (!b) {
        ds_err_set(err, "out of memory");
        return NULL;
    }
    b->timeout_ms = j->timeout_ms;
    ncclUniqueId id;
    if (share_unique_id(j, &id, err) != 0) goto fail;
    if ((ce = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (ce = cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&b->scratch, sizeof(int))) != cudaSuccess) {
        cuda_fail(err, ce, "nccl setup");
        goto fail;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&b->comm, j->world, id, j->rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_fail(err, r, "ncclCommInitRankConfig");
        goto fail;
    }
    if (nccl_settle(b, ds_now_ms() + j->timeout_ms, "ncclCommInitRankConfig", err) != 0) goto fail;
    *vt = &nccl_vtable;
    return b;
fail:
    nccl_close(b);
    return NULL;
}

#else

typedef int ds_comm_nccl_absent; /* keeps this translation unit non-empty */

#endif
