// The cuda device (kernels/device.h): one GPU, a non-blocking compute stream with the
// cuBLAS handle on it, memory from a stream-ordered pool that keeps what it was given
// (release threshold UINT64_MAX: after the first step no allocation reaches the
// driver), more streams and events for the communicator, and a sticky error: the first
// failure of anything queued (a kernel's fault, a launch the table could not make) is
// what every later wait reports.
//
// On this device a ds_stream * is the cudaStream_t itself and a ds_event * the
// cudaEvent_t (ds_cuda_device_stream / ds_cuda_device_event say so in kernels_cuda.h).
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "cuda_device.cuh"

extern "C" {
#include "engine_opts.h"
}

ds_cuda_device *ds_cu_the_device;

static ds_cuda_device *dev_of(ds_device *d) { return (ds_cuda_device *)d; }

void ds_cu_device_fail(ds_cuda_device *d, const char *fmt, ...) {
    pthread_mutex_lock(&d->mu);
    if (!d->failed) {
        char msg[900];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        ds_err_set(&d->failure, "%s: %s", d->dev.name, msg);
        d->failed = 1;
    }
    pthread_mutex_unlock(&d->mu);
}

// 0, or -1 with the sticky error in err.
static int sticky(ds_cuda_device *d, ds_err *err) {
    pthread_mutex_lock(&d->mu);
    int failed = d->failed;
    if (failed && err) *err = d->failure;
    pthread_mutex_unlock(&d->mu);
    return failed ? -1 : 0;
}

// A failed CUDA call of a wait: the error becomes sticky (a kernel fault is sticky in
// CUDA too: the context is lost) and is returned.
static int wait_failed(ds_cuda_device *d, cudaError_t e, const char *what, ds_err *err) {
    ds_cu_device_fail(d, "%s: %s (an earlier kernel or copy on the device failed)", what,
                      cudaGetErrorString(e));
    return sticky(d, err);
}

static cudaStream_t stream_of(ds_cuda_device *d, ds_stream *s) {
    return s ? (cudaStream_t)s : d->ctx->stream;
}

// ---- memory ----------------------------------------------------------------------------

static size_t pool_attr(ds_cuda_device *d, cudaMemPoolAttr a) {
    unsigned long long v = 0;
    if (cudaMemPoolGetAttribute(d->pool, a, &v) != cudaSuccess) return 0;
    return (size_t)v;
}

static void cuda_mem_info(ds_device *dd, ds_device_mem *out) {
    ds_cuda_device *d = dev_of(dd);
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        total_b = d->total_mem;
    }
    out->total = total_b;
    out->reserved = pool_attr(d, cudaMemPoolAttrReservedMemCurrent);
    pthread_mutex_lock(&d->mu);
    out->in_use = d->in_use;
    pthread_mutex_unlock(&d->mu);
    // what this device could still give (device.h): the GPU's free memory and what the
    // pool holds unused, as on sim, whose free counts its whole region
    out->free = free_b + (out->reserved > out->in_use ? out->reserved - out->in_use : 0);
}

// Not zeroed: the pool's block as its last user left it (device.h's alloc_uninit).
static void *cuda_alloc_uninit(ds_device *dd, size_t bytes, ds_err *err) {
    ds_cuda_device *d = dev_of(dd);
    size_t asked = bytes ? bytes : 1;
    void *p = NULL;
    cudaError_t e = cudaMallocFromPoolAsync(&p, asked, d->pool, d->ctx->stream);
    if (e == cudaErrorMemoryAllocation) {
        // blocks freed on the stream become reusable once it has run that far
        cudaGetLastError();
        if (cudaStreamSynchronize(d->ctx->stream) == cudaSuccess)
            e = cudaMallocFromPoolAsync(&p, asked, d->pool, d->ctx->stream);
    }
    if (e != cudaSuccess) {
        cudaGetLastError(); // out of memory is not sticky: the device stays usable
        ds_device_mem m;
        cuda_mem_info(dd, &m);
        size_t held = m.reserved > m.in_use ? m.reserved - m.in_use : 0;
        ds_err_set(err,
                   "%s: out of device memory: asked %zu bytes, %zu free of %zu on the device, "
                   "%zu in use through this device's allocator and %zu more held by it (%s)",
                   d->dev.name, bytes, m.free - held, m.total, m.in_use, held, cudaGetErrorString(e));
        return NULL;
    }
    pthread_mutex_lock(&d->mu);
    d->in_use += bytes;
    pthread_mutex_unlock(&d->mu);
    return p;
}

static void cuda_free(ds_device *dd, void *p, size_t bytes);

static void *cuda_alloc(ds_device *dd, size_t bytes, ds_err *err) {
    ds_cuda_device *d = dev_of(dd);
    void *p = cuda_alloc_uninit(dd, bytes, err);
    if (!p) return NULL;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, d->ctx->stream);
    if (e != cudaSuccess) {
        cuda_free(dd, p, bytes);
        ds_err_set(err, "%s: zeroing %zu new bytes: %s", d->dev.name, bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_free(ds_device *dd, void *p, size_t bytes) {
    ds_cuda_device *d = dev_of(dd);
    if (!p) return;
    cudaError_t e = cudaFreeAsync(p, d->ctx->stream);
    if (e != cudaSuccess) ds_cu_device_fail(d, "free of %zu bytes: %s", bytes, cudaGetErrorString(e));
    pthread_mutex_lock(&d->mu);
    d->in_use -= bytes <= d->in_use ? bytes : d->in_use;
    pthread_mutex_unlock(&d->mu);
}

static void cuda_memset0(ds_device *dd, void *p, size_t bytes) {
    ds_cuda_device *d = dev_of(dd);
    if (!bytes) return;
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, d->ctx->stream);
    if (e != cudaSuccess) ds_cu_device_fail(d, "memset0 of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

static void cuda_copy(ds_device *dd, void *dst, const void *src, size_t bytes) {
    ds_cuda_device *d = dev_of(dd);
    if (!bytes || dst == src) return;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, d->ctx->stream);
    if (e != cudaSuccess) ds_cu_device_fail(d, "copy of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

// A host transfer in the compute stream's order, complete on return.
static int transfer(ds_cuda_device *d, void *dst, const void *src, size_t bytes,
                    cudaMemcpyKind kind, ds_err *err) {
    if (sticky(d, err) != 0) return -1;
    if (!bytes) return 0;
    const char *what = kind == cudaMemcpyDeviceToHost ? "to_host" : "from_host";
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, d->ctx->stream);
    if (e == cudaErrorInvalidValue) { // a bad pointer: the caller's error, not the device's
        cudaGetLastError();
        return ds_err_set(err, "%s: %s of %zu bytes: %s (is the device pointer one of %s's?)",
                          d->dev.name, what, bytes, cudaGetErrorString(e), d->dev.name);
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->ctx->stream);
    if (e != cudaSuccess) return wait_failed(d, e, what, err);
    // a communicator's watch may have failed the device while this waited (a collective
    // the stream waited for was aborted: what was copied is not the data)
    return sticky(d, err);
}

static int cuda_to_host(ds_device *dd, void *dst, const void *src, size_t bytes, ds_err *err) {
    return transfer(dev_of(dd), dst, src, bytes, cudaMemcpyDeviceToHost, err);
}

static int cuda_from_host(ds_device *dd, void *dst, const void *src, size_t bytes, ds_err *err) {
    return transfer(dev_of(dd), dst, src, bytes, cudaMemcpyHostToDevice, err);
}

// Every stream of this device, not cudaDeviceSynchronize: that would also wait for
// NCCL's kernels on streams not ours, which may wait for a peer that waits for us.
static int cuda_sync(ds_device *dd, ds_err *err) {
    ds_cuda_device *d = dev_of(dd);
    cudaError_t e = cudaStreamSynchronize(d->ctx->stream);
    for (int i = 0; e == cudaSuccess && i < d->nstreams; i++) e = cudaStreamSynchronize(d->streams[i]);
    if (e != cudaSuccess) return wait_failed(d, e, "sync", err);
    return sticky(d, err);
}

// ---- streams and events --------------------------------------------------------------

// A communicator's stream: non-blocking (the legacy default stream does not order it)
// and of the highest priority, so that its kernels go first when both streams have work.
static ds_stream *cuda_stream_new(ds_device *dd, ds_err *err) {
    ds_cuda_device *d = dev_of(dd);
    pthread_mutex_lock(&d->mu);
    int full = d->nstreams == DS_CUDA_MAX_STREAMS;
    pthread_mutex_unlock(&d->mu);
    if (full) return ds_err_set(err, "%s: more than %d streams", d->dev.name, DS_CUDA_MAX_STREAMS), nullptr;
    int lo = 0, hi = 0;
    cudaStream_t s = NULL;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, hi);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return ds_err_set(err, "%s: creating a stream: %s", d->dev.name, cudaGetErrorString(e)), nullptr;
    }
    pthread_mutex_lock(&d->mu);
    d->streams[d->nstreams++] = s;
    pthread_mutex_unlock(&d->mu);
    return (ds_stream *)s;
}

static void cuda_stream_free(ds_device *dd, ds_stream *s) {
    ds_cuda_device *d = dev_of(dd);
    if (!s) return;
    cudaStream_t cs = (cudaStream_t)s;
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < d->nstreams; i++)
        if (d->streams[i] == cs) {
            d->streams[i] = d->streams[--d->nstreams];
            break;
        }
    pthread_mutex_unlock(&d->mu);
    cudaStreamDestroy(cs); // returns at once; the stream's queued work still runs
}

static ds_event *cuda_event_new(ds_device *dd, ds_err *err) {
    cudaEvent_t e = NULL;
    cudaError_t ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return ds_err_set(err, "%s: creating an event: %s", dd->name, cudaGetErrorString(ce)), nullptr;
    }
    return (ds_event *)e;
}

static void cuda_event_free(ds_device *dd, ds_event *e) {
    (void)dd;
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

static void cuda_event_record(ds_device *dd, ds_event *e, ds_stream *s) {
    ds_cuda_device *d = dev_of(dd);
    cudaError_t ce = cudaEventRecord((cudaEvent_t)e, stream_of(d, s));
    if (ce != cudaSuccess) ds_cu_device_fail(d, "event record: %s", cudaGetErrorString(ce));
}

static void cuda_stream_wait(ds_device *dd, ds_stream *s, ds_event *e) {
    ds_cuda_device *d = dev_of(dd);
    cudaError_t ce = cudaStreamWaitEvent(stream_of(d, s), (cudaEvent_t)e, 0);
    if (ce != cudaSuccess) ds_cu_device_fail(d, "stream wait: %s", cudaGetErrorString(ce));
}

static int cuda_event_sync(ds_device *dd, ds_event *e, ds_err *err) {
    ds_cuda_device *d = dev_of(dd);
    cudaError_t ce = cudaEventSynchronize((cudaEvent_t)e);
    if (ce != cudaSuccess) return wait_failed(d, ce, "event sync", err);
    return sticky(d, err);
}

static int cuda_event_done(ds_device *dd, ds_event *e) {
    (void)dd;
    cudaError_t ce = cudaEventQuery((cudaEvent_t)e);
    if (ce == cudaErrorNotReady) return 0;
    // an error counts as reached: the wait that follows reports it
    return 1;
}

static void *cuda_alias(ds_device *dd, const void *p) {
    (void)dd;
    return (void *)p;
}

static void cuda_close(ds_device *dd) {
    ds_cuda_device *d = dev_of(dd);
    cudaSetDevice(d->dev.index);
    if (d->ctx) cudaStreamSynchronize(d->ctx->stream);
    while (d->nstreams) cuda_stream_free(dd, (ds_stream *)d->streams[d->nstreams - 1]);
    cudaStream_t compute = d->ctx ? d->ctx->stream : NULL;
    ds_cuda_ctx_free(d->ctx); // frees its scratch into the pool first
    if (compute) cudaStreamDestroy(compute);
    if (d->pool) cudaMemPoolDestroy(d->pool);
    if (d->lock_fd >= 0) close(d->lock_fd);
    if (ds_cu_the_device == d) ds_cu_the_device = NULL;
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static const ds_device_ops CUDA_OPS = {
    // in device.h's order (C++17 has no designated initializers)
    cuda_alloc,       cuda_alloc_uninit, cuda_free,        cuda_memset0,
    cuda_copy,        cuda_to_host,      cuda_from_host,   cuda_sync,
    cuda_stream_new,  cuda_stream_free,  cuda_event_new,   cuda_event_free,
    cuda_event_record, cuda_stream_wait, cuda_event_sync,  cuda_event_done,
    NULL, // launch_host: NCCL runs on the streams themselves
    cuda_alias,       cuda_mem_info,     cuda_close,
};

// ---- opening ---------------------------------------------------------------------------

// One rank per GPU in a job: each rank holds an exclusive lock named after the GPU's
// UUID and the job, so a second rank of the same job on the same physical GPU (however
// CUDA_VISIBLE_DEVICES numbers it) is refused with the holder's pid and rank. Outside a
// job (no DS_JOB_ID) nothing is checked. The lock goes with the process.
static int claim_gpu(ds_cuda_device *d, const cudaDeviceProp *p, ds_err *err) {
    const char *job = getenv("DS_JOB_ID");
    if (!job || !*job) return 0;
    char uuid[40];
    for (int i = 0; i < 16; i++) snprintf(uuid + 2 * i, 3, "%02x", (unsigned char)p->uuid.bytes[i]);
    char path[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/dslaunch-gpu-%s-%s.lock", tmp && *tmp ? tmp : "/tmp", job, uuid);
    for (char *c = path + strlen(tmp && *tmp ? tmp : "/tmp") + 1; *c; c++)
        if (*c == '/') *c = '_';
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ds_err_errno(err, errno, "%s: opening %s", d->dev.name, path);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[128] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        close(fd);
        if (e != EWOULDBLOCK) return ds_err_errno(err, e, "%s: locking %s", d->dev.name, path);
        const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
        return ds_err_set(err,
                          "%s: two ranks on one GPU: %s (GPU %s, CUDA_VISIBLE_DEVICES=%s) is "
                          "already used by this job's %s; give each rank its own GPU "
                          "(one slot per GPU in the hostfile)",
                          d->dev.name, p->name, uuid, cvd ? cvd : "(unset)",
                          holder[0] ? holder : "other rank");
    }
    char me[128];
    const char *rank = getenv("RANK");
    int len = snprintf(me, sizeof me, "rank %s (pid %ld)", rank ? rank : "?", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, me, (size_t)len, 0) != len) {
        // the message to a second rank only loses its detail
    }
    d->lock_fd = fd;
    return 0;
}

static int setup(ds_cuda_device *d, int index, ds_err *err) {
    cudaError_t e = cudaSetDevice(index);
    if (e != cudaSuccess)
        return ds_err_set(err, "%s: cudaSetDevice: %s", d->dev.name, cudaGetErrorString(e));
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, index)) != cudaSuccess)
        return ds_err_set(err, "%s: %s", d->dev.name, cudaGetErrorString(e));
    d->total_mem = p.totalGlobalMem;
    if (p.major < 8)
        return ds_err_set(err, "%s: %s is sm_%d%d; this build runs on sm_80 and newer",
                          d->dev.name, p.name, p.major, p.minor);
    if (claim_gpu(d, &p, err) != 0) return -1;
    char why[512] = "";
    d->ctx = ds_cuda_ctx_create(index, why, sizeof why);
    if (!d->ctx) return ds_err_set(err, "%s: %s", d->dev.name, why);
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = index;
    unsigned long long keep_all = UINT64_MAX;
    cudaStream_t s = NULL;
    const char *what = "cudaMemPoolCreate";
    e = cudaMemPoolCreate(&d->pool, &props);
    if (e == cudaSuccess) {
        what = "pool release threshold";
        e = cudaMemPoolSetAttribute(d->pool, cudaMemPoolAttrReleaseThreshold, &keep_all);
    }
    if (e == cudaSuccess) {
        what = "the compute stream";
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    }
    if (e != cudaSuccess) return ds_err_set(err, "%s: %s: %s", d->dev.name, what, cudaGetErrorString(e));
    if (ds_cuda_ctx_set_stream(d->ctx, (void *)s) != 0) // cuda_close destroys s
        return ds_err_set(err, "%s: %s", d->dev.name, ds_cuda_ctx_error(d->ctx));
    d->ctx->pool = d->pool;
    // TF32 only when the job asks ([engine] tf32 = true, DS_ENGINE_TF32)
    ds_engine_opts o;
    char bad[400];
    if (ds_engine_opts_from_env(&o, bad, sizeof bad) != 0) return ds_err_set(err, "%s", bad);
    if (o.tf32 == 1 && ds_cuda_ctx_set_tf32(d->ctx, 1) != 0)
        return ds_err_set(err, "%s: %s", d->dev.name, ds_cuda_ctx_error(d->ctx));
    return 0;
}

extern "C" ds_device *ds_device_cuda_open(int index, ds_err *err) {
    char why[256] = "";
    int n = ds_gpu_count(why, sizeof why);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    if (n == 0)
        return ds_err_set(err, "device cuda:%d: no usable GPU on this node: %s%s%s", index, why,
                          cvd ? ", CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : ""), nullptr;
    if (index < 0 || index >= n)
        return ds_err_set(err, "device cuda:%d: this node has %d visible GPU%s (cuda:0..cuda:%d)%s%s",
                          index, n, n == 1 ? "" : "s", n - 1,
                          cvd ? ", CUDA_VISIBLE_DEVICES=" : "", cvd ? cvd : ""), nullptr;
    if (ds_cu_the_device)
        return ds_err_set(err, "device cuda:%d: this process already runs on %s", index,
                          ds_cu_the_device->dev.name), nullptr;
    ds_cuda_device *d = (ds_cuda_device *)calloc(1, sizeof *d);
    if (!d) return ds_err_set(err, "device cuda:%d: out of host memory", index), nullptr;
    d->dev.kind = DS_DEV_CUDA;
    snprintf(d->dev.name, sizeof d->dev.name, "cuda:%d", index);
    d->dev.index = index;
    d->dev.ops = &CUDA_OPS;
    d->dev.k = &ds_cuda_kernels;
    d->dev.impl = d;
    d->lock_fd = -1;
    pthread_mutex_init(&d->mu, NULL);
    if (setup(d, index, err) != 0) {
        cuda_close(&d->dev);
        return nullptr;
    }
    ds_cu_the_device = d;
    return &d->dev;
}

extern "C" void *ds_cuda_device_stream(ds_device *d, ds_stream *s) {
    if (!d || d->kind != DS_DEV_CUDA) return NULL;
    return (void *)stream_of(dev_of(d), s);
}

extern "C" void *ds_cuda_device_event(ds_device *d, ds_event *e) {
    if (!d || d->kind != DS_DEV_CUDA) return NULL;
    return (void *)e;
}

extern "C" ds_cuda_ctx *ds_cuda_device_ctx(ds_device *d) {
    if (!d || d->kind != DS_DEV_CUDA) return NULL;
    return dev_of(d)->ctx;
}

extern "C" void ds_cuda_device_fail(ds_device *d, const char *msg) {
    if (d && d->kind == DS_DEV_CUDA) ds_cu_device_fail(dev_of(d), "%s", msg);
}
