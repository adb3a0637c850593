// Thin extern "C" shim over Gloo (see gloo_shim.h). Every entry point catches every
// exception: C callers only ever see -1 and a message.
#include "gloo_shim.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "gloo_store.hh"

extern "C" {
#include "alloc.h"
#include "comm.h"
#include "kernels.h"
}

struct ds_gloo {
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::chrono::milliseconds timeout;
  char* scratch = nullptr;  // reduce-scatter receive ring (kRingDepth segments), DS_MEM_COMM
};

// Our slot prefix for the reduce-scatter ring; Gloo's own collectives use 0x01..0x08.
static const uint8_t kRingSlotPrefix = 0x40;
// A ring step moves its chunk in segments received into a small ring of kRingDepth
// segment buffers: the addition of one overlaps the transfer of the next ones, and the
// scratch memory is a fixed 4 MiB (counted as DS_MEM_COMM) whatever the buffer size.
static const size_t kRingSegmentBytes = 1 << 20;
static const size_t kRingDepth = 4;
static_assert(kRingDepth * kRingSegmentBytes == DS_COMM_GLOO_RING_BYTES,
              "comm.h states the ring's size for the memory planner");

static int fail(ds_err* err, const char* what, const char* why) {
  return ds_err_set(err, "gloo %s: %s", what, why);
}

// Runs fn, turning any exception into -1 + err.
template <typename F>
static int guarded(ds_err* err, const char* what, F fn) {
  try {
    fn();
    return 0;
  } catch (const std::exception& e) {
    return fail(err, what, e.what());
  } catch (...) {
    return fail(err, what, "unknown exception");
  }
}

// Element-wise sums written here (not gloo::sum) so the order and rounding are ours:
// c[i] = a[i] + b[i], one addition per element.
static void sum_f32(void* c, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(c);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; i++) o[i] = x[i] + y[i];
}

static void sum_i32(void* c, const void* a, const void* b, size_t n) {
  int32_t* o = static_cast<int32_t*>(c);
  const int32_t* x = static_cast<const int32_t*>(a);
  const int32_t* y = static_cast<const int32_t*>(b);
  // Wrap-around like NCCL's int sum, without signed overflow UB.
  for (size_t i = 0; i < n; i++) o[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
}

// 16-bit sums: widened to fp32, added, rounded back once per addition (as NCCL does for
// 16-bit types), so the result depends on the order; each chunk is summed by one chain
// of ranks and then copied, which is what keeps every rank's bits the same.
static void sum_bf16(void* c, const void* a, const void* b, size_t n) {
  ds_half_add(DS_HALF_BF16, static_cast<uint16_t*>(c), static_cast<const uint16_t*>(a),
              static_cast<const uint16_t*>(b), n);
}

static void sum_f16(void* c, const void* a, const void* b, size_t n) {
  ds_half_add(DS_HALF_F16, static_cast<uint16_t*>(c), static_cast<const uint16_t*>(a),
              static_cast<const uint16_t*>(b), n);
}

using SumFn = void (*)(void*, const void*, const void*, size_t);

static SumFn sum_of(ds_gloo_type t) {
  switch (t) {
    case DS_GLOO_F32: return sum_f32;
    case DS_GLOO_I32: return sum_i32;
    case DS_GLOO_BF16: return sum_bf16;
    case DS_GLOO_F16: return sum_f16;
  }
  throw std::invalid_argument("unknown element type");
}

static size_t esize_of(ds_gloo_type t) {
  return t == DS_GLOO_BF16 || t == DS_GLOO_F16 ? 2 : 4;
}

extern "C" ds_gloo* ds_gloo_open(ds_store_client* store, const char* prefix, int rank,
                                 int world, const char* addr, int timeout_ms, ds_err* err) {
  ds_gloo* g = new (std::nothrow) ds_gloo();
  if (!g) {
    ds_err_set(err, "gloo open: out of memory");
    return nullptr;
  }
  g->timeout = std::chrono::milliseconds(timeout_ms);
  int rc = guarded(err, "device", [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = addr;
    g->dev = gloo::transport::tcp::CreateDevice(attr);
  });
  if (rc == 0)
    rc = guarded(err, "connect", [&] {
      DsGlooStore st(store, std::string(prefix) + "gloo/", timeout_ms);
      g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
      g->ctx->setTimeout(g->timeout);
      g->ctx->connectFullMesh(st, g->dev);
    });
  if (rc != 0) {
    ds_gloo_close(g);
    return nullptr;
  }
  return g;
}

extern "C" void ds_gloo_close(ds_gloo* g) {
  if (!g) return;
  try {
    g->ctx.reset();
    g->dev.reset();
  } catch (...) {
    // Closing a mesh with dead peers must not take the process down.
  }
  ds_free_host(g->scratch, kRingDepth * kRingSegmentBytes, DS_MEM_COMM);
  delete g;
}

extern "C" int ds_gloo_allreduce(ds_gloo* g, void* buf, size_t count, ds_gloo_type t,
                                 uint32_t tag, ds_err* err) {
  return guarded(err, "allreduce", [&] {
    gloo::AllreduceOptions opts(g->ctx);
    // Only the element size matters to Gloo (its segments stay whole elements); the
    // arithmetic is ours.
    if (t == DS_GLOO_F32)
      opts.setOutput(static_cast<float*>(buf), count);
    else if (t == DS_GLOO_I32)
      opts.setOutput(static_cast<int32_t*>(buf), count);
    else if (t == DS_GLOO_F16)
      opts.setOutput(static_cast<gloo::float16*>(buf), count);
    else
      opts.setOutput(static_cast<uint16_t*>(buf), count);  // bf16: gloo has no type for it
    opts.setReduceFunction(sum_of(t));
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setTag(tag);
    opts.setTimeout(g->timeout);
    gloo::allreduce(opts);
  });
}

// Ring reduce-scatter on unbound buffers. At step s rank r sends its partial sum of
// chunk (r-s-1) to r+1 and adds the partial sum of chunk (r-s-2) received from r-1;
// after world-1 steps chunk r holds the sum over all ranks, accumulated in ring order
// starting at rank r+1 (fixed for a fixed world size: deterministic). Receives on one
// slot from one peer complete in the order they were posted, and Gloo moves a send's
// data only once the matching receive is posted, so at most kRingDepth segments are in
// flight into the scratch ring while all sends are queued at once.
extern "C" int ds_gloo_reduce_scatter(ds_gloo* g, void* in, void* out, size_t count,
                                      ds_gloo_type t, uint32_t tag, ds_err* err) {
  return guarded(err, "reduce-scatter", [&] {
    const int rank = g->ctx->rank, world = g->ctx->size;
    // seg is a multiple of every element size, so no segment splits an element.
    const size_t esize = esize_of(t), bytes = count * esize, seg = kRingSegmentBytes;
    char* base = static_cast<char*>(in);
    if (!g->scratch) {
      ds_err e;  // Gloo's staging ring is host memory whatever the rank's device
      g->scratch = static_cast<char*>(ds_alloc_host(kRingDepth * seg, DS_MEM_COMM, &e));
      if (!g->scratch) throw std::runtime_error(e.msg);
    }
    auto inbuf = g->ctx->createUnboundBuffer(in, bytes * world);
    auto ring = g->ctx->createUnboundBuffer(g->scratch, kRingDepth * seg);
    const int right = (rank + 1) % world, left = (rank + world - 1) % world;
    const size_t nseg = (bytes + seg - 1) / seg;
    auto seg_len = [&](size_t k) { return bytes - k * seg < seg ? bytes - k * seg : seg; };
    const uint64_t slot0 = gloo::Slot::build(kRingSlotPrefix, tag);
    const SumFn sum = sum_of(t);
    for (int s = 0; s < world - 1; s++) {
      const size_t send_chunk = (size_t)((rank - s - 1 + 2 * world) % world);
      const size_t recv_chunk = (size_t)((rank - s - 2 + 2 * world) % world);
      const uint64_t slot = slot0 + (uint64_t)s;
      for (size_t k = 0; k < nseg && k < kRingDepth; k++)
        ring->recv(left, slot, (k % kRingDepth) * seg, seg_len(k));
      for (size_t k = 0; k < nseg; k++)
        inbuf->send(right, slot, send_chunk * bytes + k * seg, seg_len(k));
      for (size_t k = 0; k < nseg; k++) {
        if (!ring->waitRecv(g->timeout)) throw std::runtime_error("receive aborted");
        char* acc = base + recv_chunk * bytes + k * seg;
        sum(acc, acc, g->scratch + (k % kRingDepth) * seg, seg_len(k) / esize);
        if (k + kRingDepth < nseg)
          ring->recv(left, slot, (k % kRingDepth) * seg, seg_len(k + kRingDepth));
      }
      for (size_t k = 0; k < nseg; k++)
        if (!inbuf->waitSend(g->timeout)) throw std::runtime_error("send aborted");
    }
    char* mine = base + (size_t)rank * bytes;
    if (out != mine && bytes > 0) std::memmove(out, mine, bytes);
  });
}

extern "C" int ds_gloo_allgather(ds_gloo* g, const void* in, void* out, size_t bytes,
                                 uint32_t tag, ds_err* err) {
  return guarded(err, "allgather", [&] {
    gloo::AllgatherOptions opts(g->ctx);
    uint8_t* o = static_cast<uint8_t*>(out);
    if (in != o + (size_t)g->ctx->rank * bytes)
      opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    opts.setOutput(o, bytes * (size_t)g->ctx->size);
    opts.setTag(tag);
    opts.setTimeout(g->timeout);
    gloo::allgather(opts);
  });
}

extern "C" int ds_gloo_broadcast(ds_gloo* g, void* buf, size_t bytes, int root,
                                 uint32_t tag, ds_err* err) {
  return guarded(err, "broadcast", [&] {
    gloo::BroadcastOptions opts(g->ctx);
    opts.setOutput(static_cast<uint8_t*>(buf), bytes);
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(g->timeout);
    gloo::broadcast(opts);
  });
}

extern "C" int ds_gloo_barrier(ds_gloo* g, uint32_t tag, ds_err* err) {
  return guarded(err, "barrier", [&] {
    gloo::BarrierOptions opts(g->ctx);
    opts.setTag(tag);
    opts.setTimeout(g->timeout);
    gloo::barrier(opts);
  });
}
