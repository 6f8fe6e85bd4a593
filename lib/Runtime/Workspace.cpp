//===- Workspace.cpp - Zeroed workspaces of one launch -------------------===//
//
// The device's default memory pool keeps no freed memory across a
// synchronisation (release threshold 0): a launch after every
// synchronisation paid for mapping its few bytes of workspace again. Eager
// launches therefore take their workspace from a pool of the runtime's own
// per device that keeps up to kPoolKeptBytes; a stream capture keeps the
// default pool's allocation nodes, owned by the graph. A persistent
// forward's tile counter needs neither on an eager stream: the kernel puts
// it back to 0, so each stream keeps one.
//
//===----------------------------------------------------------------------===//

#include "Workspace.h"

using namespace fa::runtime;

namespace {

bool runsEagerly(CUstream stream);

/// A pool of device memory on `device` that keeps kPoolKeptBytes.
fa_status createPool(CUdevice device, CUmemoryPool &out) {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  if (CUresult r = cuMemPoolCreate(&out, &props))
    return cuFail("cuMemPoolCreate", r);
  cuuint64_t kept = kPoolKeptBytes;
  if (CUresult r = cuMemPoolSetAttribute(
          out, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &kept)) {
    cuMemPoolDestroy(out);
    return cuFail("cuMemPoolSetAttribute(RELEASE_THRESHOLD)", r);
  }
  return FA_SUCCESS;
}

/// The runtime's pool of the current context's device, made on first use.
/// Never destroyed: a pool outlives the contexts that use it, and the
/// process exit returns its memory.
fa_status runtimePool(CUmemoryPool &out) {
  static KeptPerKey<CUdevice, CUmemoryPool> pools;
  CUdevice device = 0;
  if (CUresult r = cuCtxGetDevice(&device))
    return cuFail("cuCtxGetDevice", r);
  return pools.get(device, out, [&](CUmemoryPool &made) {
    return createPool(device, made);
  });
}

/// Allocates `bytes` on `stream` from the source for its capture status.
fa_status allocateWorkspace(const char *api, const std::string &what,
                            uint64_t bytes, CUstream stream,
                            CUdeviceptr &out) {
  CUresult r;
  const char *call;
  if (runsEagerly(stream)) {
    CUmemoryPool pool = nullptr;
    if (fa_status s = runtimePool(pool))
      return failWithPrefix(s, std::string(api) + ": " + what + ": ");
    call = "cuMemAllocFromPoolAsync";
    r = cuMemAllocFromPoolAsync(&out, bytes, pool, stream);
  } else {
    call = "cuMemAllocAsync";
    r = cuMemAllocAsync(&out, bytes, stream);
  }
  if (r != CUDA_SUCCESS)
    return fail(FA_ERROR_CUDA, std::string(api) + ": " + cuMessage(call, r) +
                                   " for " + what);
  return FA_SUCCESS;
}

/// Whether `stream` runs eagerly (it is not being captured; a stream whose
/// status cannot be read counts as captured, and its allocation then
/// reports what is wrong with it).
bool runsEagerly(CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (cuStreamIsCapturing(stream, &capture) != CUDA_SUCCESS)
    return false;
  return workspaceSourceFor(capture) == WorkspaceSource::RuntimePool;
}

/// A zeroed u32 in the current context, zeroed in order on `stream`.
fa_status makeTileCounter(CUstream stream, CUdeviceptr &out) {
  if (CUresult r = cuMemAlloc(&out, kTileCounterBytes))
    return cuFail("cuMemAlloc", r);
  if (CUresult r = cuMemsetD32Async(out, 0, 1, stream)) {
    cuMemFree(out);
    return cuFail("cuMemsetD32Async", r);
  }
  return FA_SUCCESS;
}

/// Tile counters by the driver's ids of (context, stream), which are unique
/// for the process: a handle a destroyed context or stream leaves behind
/// and a new one reuses gets a counter of its own. Kept for the process
/// (their contexts free them).
KeptPerKey<std::pair<unsigned long long, unsigned long long>, CUdeviceptr>
    streamTileCounters;

/// The tile counter of `stream` in the current context; false in `kept`
/// when the stream should take a per-launch workspace instead (the
/// per-thread default stream, whose handle names a different stream in
/// each thread; a context or stream whose id cannot be read; too many
/// streams kept already).
fa_status streamTileCounter(CUstream stream, CUdeviceptr &out, bool &kept) {
  kept = false;
  if (stream == CU_STREAM_PER_THREAD ||
      streamTileCounters.size() >= kMaxStreamTileCounters)
    return FA_SUCCESS;
  CUcontext ctx = nullptr;
  unsigned long long ctxId = 0, streamId = 0;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx ||
      cuCtxGetId(ctx, &ctxId) != CUDA_SUCCESS ||
      cuStreamGetId(stream, &streamId) != CUDA_SUCCESS)
    return FA_SUCCESS;
  if (fa_status s = streamTileCounters.get(
          {ctxId, streamId}, out,
          [&](CUdeviceptr &made) { return makeTileCounter(stream, made); }))
    return s;
  kept = true;
  return FA_SUCCESS;
}

} // namespace

namespace fa::runtime {

fa_status withTileCounter(const char *api, const std::string &tag,
                          CUstream stream, void *&param,
                          const std::function<fa_status()> &launchMain) {
  auto what = [&] {
    return "the tile counter of persistent kernel '" + tag + "'";
  };
  if (runsEagerly(stream)) {
    CUdeviceptr counter = 0;
    bool kept = false;
    if (fa_status s = streamTileCounter(stream, counter, kept))
      return failWithPrefix(s, std::string(api) + ": " + what() + ": ");
    if (kept) {
      param = &counter;
      return launchMain();
    }
  }
  return withZeroedWorkspace(api, what(), kTileCounterBytes, stream, param,
                             launchMain);
}

fa_status withZeroedWorkspace(const char *api, const std::string &what,
                              uint64_t bytes, CUstream stream, void *&param,
                              const std::function<fa_status()> &launchMain) {
  CUdeviceptr workspace = 0;
  if (fa_status s = allocateWorkspace(api, what, bytes, stream, workspace))
    return s;
  if (CUresult r = cuMemsetD32Async(workspace, 0, bytes / 4, stream)) {
    cuMemFreeAsync(workspace, stream);
    return cuFail("cuMemsetD32Async", r);
  }
  param = &workspace;
  // Freed whatever the launch did; its error, if any, is the one reported.
  return cleanUpAfter(launchMain(), [&] {
    if (CUresult r = cuMemFreeAsync(workspace, stream))
      return cuFail("cuMemFreeAsync", r);
    return FA_SUCCESS;
  });
}

} // namespace fa::runtime
