//===- TensorMaps.cpp - Encode TMA tensor maps and launch with them ------===//
//
// Encoding a map is a host call; the kernels read the maps from device
// memory, so each launch needs its maps copied there and kept unchanged
// until the kernel has read them. The ring of slots below does both without
// a synchronisation per launch, and reuses a slot for a repeated launch.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"

#include <cstring>
#include <sstream>

using namespace fa::runtime;

namespace {

/// Bytes of one slot: the maps of one launch, each 128 B and so 64 B aligned
/// at any slot start (the ring's base is 256 B aligned), then the u32 tile
/// counter of a persistent forward. The ring starts zeroed; such a kernel
/// leaves its counter at 0 again (docs/ABI.md), and launches that share a
/// slot are ordered (same stream, or the slot was idle).
constexpr size_t kMapBytes = FA_MAX_TENSOR_MAPS * sizeof(CUtensorMap);
constexpr size_t kMapSlotBytes = kMapBytes + 64;
/// Slots per context: distinct map sets that stay cached, and launches with
/// maps that may be in flight before one waits.
constexpr int kMapSlots = 128;

/// The arguments of cuTensorMapEncodeTiled, for the error when it fails.
std::string mapArgsText(const fa_tensor_map_args &m) {
  std::ostringstream os;
  auto list = [&](const auto *xs, unsigned n) {
    os << '{';
    for (unsigned i = 0; i < n; ++i)
      os << (i ? ", " : "") << xs[i];
    os << '}';
  };
  os << "dataType " << static_cast<int>(m.data_type) << ", rank " << m.rank
     << ", globalAddress " << hex(m.global_address) << ", globalDim ";
  list(m.global_dim, m.rank);
  os << ", globalStrides ";
  list(m.global_strides, m.rank - 1);
  os << ", boxDim ";
  list(m.box_dim, m.rank);
  os << ", elementStrides ";
  list(m.element_strides, m.rank);
  os << ", interleave " << static_cast<int>(m.interleave) << ", swizzle "
     << static_cast<int>(m.swizzle) << ", l2Promotion "
     << static_cast<int>(m.l2_promotion) << ", oobFill "
     << static_cast<int>(m.oob_fill);
  return os.str();
}

fa_status encodeMaps(const std::vector<fa_tensor_map_args> &args,
                     CUtensorMap *out) {
  for (size_t i = 0; i < args.size(); ++i) {
    const fa_tensor_map_args &m = args[i];
    std::memset(&out[i], 0, sizeof(CUtensorMap));
    CUresult r = cuTensorMapEncodeTiled(
        &out[i], m.data_type, m.rank,
        reinterpret_cast<void *>(m.global_address), m.global_dim,
        m.global_strides, m.box_dim, m.element_strides, m.interleave, m.swizzle,
        m.l2_promotion, m.oob_fill);
    if (r != CUDA_SUCCESS)
      return fail(FA_ERROR_CUDA, cuMessage("cuTensorMapEncodeTiled", r) +
                                     " for " + m.tensor + "_map (parameter " +
                                     std::to_string(m.param) +
                                     "): " + mapArgsText(m));
  }
  return FA_SUCCESS;
}

/// FNV-1a: a slot is looked up by the hash of its maps' bytes.
uint64_t hashBytes(const void *data, size_t n) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

/// The map ring of `ctx` in `bundle`, made on first use.
fa_status mapRing(fa_bundle &bundle, CUcontext ctx, MapRing *&out) {
  std::lock_guard<std::mutex> lock(bundle.mutex);
  for (auto &r : bundle.mapRings)
    if (r->ctx == ctx) {
      out = r.get();
      return FA_SUCCESS;
    }
  auto ring = std::make_unique<MapRing>();
  if (fa_status s = ring->init(ctx))
    return s;
  out = ring.get();
  bundle.mapRings.push_back(std::move(ring));
  return FA_SUCCESS;
}

} // namespace

namespace fa::runtime {

MapRing::~MapRing() {
  // Launches may still read the slots; the context may already be gone,
  // in which case it took the memory and events with it.
  if (cuCtxPushCurrent(ctx) != CUDA_SUCCESS)
    return;
  for (MapSlot &s : slots)
    if (s.lastUse) {
      cuEventSynchronize(s.lastUse);
      cuEventDestroy(s.lastUse);
    }
  if (base)
    cuMemFree(base);
  CUcontext popped;
  cuCtxPopCurrent(&popped);
}

fa_status MapRing::init(CUcontext context) {
  ctx = context;
  slots.resize(kMapSlots);
  for (MapSlot &s : slots)
    if (CUresult r = cuEventCreate(&s.lastUse, CU_EVENT_DISABLE_TIMING))
      return cuFail("cuEventCreate (tensor map slots)", r);
  if (CUresult r = cuMemAlloc(&base, kMapSlots * kMapSlotBytes))
    return cuFail("cuMemAlloc (tensor map slots)", r);
  if (CUresult r = cuMemsetD8(base, 0, kMapSlots * kMapSlotBytes))
    return cuFail("cuMemsetD8 (tensor map slots)", r);
  if (base % 64 != 0)
    return fail(FA_ERROR_CUDA, "cuMemAlloc returned " + hex(base) +
                                   ", which is not 64-byte aligned");
  return FA_SUCCESS;
}

CUdeviceptr MapRing::address(int slot) const {
  return base + slot * kMapSlotBytes;
}

bool MapRing::idle(const MapSlot &s) const {
  return cuEventQuery(s.lastUse) == CUDA_SUCCESS;
}

fa_status MapRing::freeSlot(int &out) {
  out = -1;
  for (int i = 0; i < kMapSlots && out < 0; ++i) {
    int j = (next + i) % kMapSlots;
    if (slots[j].bytes == 0 || idle(slots[j]))
      out = j;
  }
  if (out >= 0)
    return FA_SUCCESS;
  // Every slot is read by a launch in flight: wait for the oldest.
  out = next;
  if (CUresult r = cuEventSynchronize(slots[out].lastUse))
    return cuFail("cuEventSynchronize (tensor map slot)", r);
  return FA_SUCCESS;
}

fa_status MapRing::acquire(const CUtensorMap *maps, size_t bytes,
                           CUstream stream, unsigned long long streamId,
                           int &out) {
  uint64_t h = hashBytes(maps, bytes);
  auto it = index.find(h);
  if (it != index.end()) {
    MapSlot &s = slots[it->second];
    if (s.bytes == bytes && std::memcmp(s.maps, maps, bytes) == 0 &&
        (s.stream == streamId || idle(s))) {
      out = it->second;
      return FA_SUCCESS;
    }
  }
  int victim = -1;
  if (fa_status s = freeSlot(victim))
    return s;
  next = (victim + 1) % kMapSlots;
  MapSlot &s = slots[victim];
  auto old = index.find(s.hash);
  if (s.bytes && old != index.end() && old->second == victim)
    index.erase(old);
  s.bytes = 0;
  // Pageable source: the driver has taken the bytes when this returns.
  if (CUresult r = cuMemcpyHtoDAsync(address(victim), maps, bytes, stream))
    return cuFail("cuMemcpyHtoDAsync (tensor maps)", r);
  std::memcpy(s.maps, maps, bytes);
  s.bytes = bytes;
  s.hash = h;
  s.stream = streamId;
  index[h] = victim;
  out = victim;
  return FA_SUCCESS;
}

fa_status MapRing::used(int slot, CUstream stream,
                        unsigned long long streamId) {
  MapSlot &s = slots[slot];
  if (CUresult r = cuEventRecord(s.lastUse, stream)) {
    // Its copy may still be pending; keep it from being reused as is.
    auto it = index.find(s.hash);
    if (it != index.end() && it->second == slot)
      index.erase(it);
    return cuFail("cuEventRecord (tensor map slot)", r);
  }
  s.stream = streamId;
  return FA_SUCCESS;
}

fa_status rejectCapture(const char *api, const KernelConfig &config,
                        CUstream stream) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (CUresult r = cuStreamIsCapturing(stream, &capture))
    return cuFail("cuStreamIsCapturing", r);
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return fail(FA_ERROR_UNSUPPORTED,
                std::string(api) + ": kernel '" + config.tag +
                    "' takes tensor maps in runtime-owned memory and cannot "
                    "be captured into a CUDA graph");
  return FA_SUCCESS;
}

fa_status launchWithMaps(const fa_kernel &kernel, const char *api,
                         const std::vector<fa_tensor_map_args> &mapArgs,
                         CUcontext ctx, CUfunction f, const Entry &entry,
                         const Grid &grid, CUstream stream, void **params,
                         int counterParam) {
  const KernelConfig &c = kernel.config;
  CUtensorMap maps[FA_MAX_TENSOR_MAPS];
  if (fa_status s = encodeMaps(mapArgs, maps))
    return failWithPrefix(s, std::string(api) + ": kernel '" + c.tag + "': ");
  if (fa_status s = rejectCapture(api, c, stream))
    return s;
  unsigned long long streamId = 0;
  if (CUresult r = cuStreamGetId(stream, &streamId))
    return cuFail("cuStreamGetId", r);
  MapRing *ring = nullptr;
  if (fa_status s = mapRing(*kernel.bundle, ctx, ring))
    return s;

  std::lock_guard<std::mutex> lock(ring->mutex);
  int slot = 0;
  if (fa_status s = ring->acquire(maps, mapArgs.size() * sizeof(CUtensorMap),
                                  stream, streamId, slot))
    return s;
  CUdeviceptr mapPointers[FA_MAX_TENSOR_MAPS];
  for (size_t i = 0; i < mapArgs.size(); ++i) {
    mapPointers[i] = ring->address(slot) + i * sizeof(CUtensorMap);
    params[mapArgs[i].param] = &mapPointers[i];
  }
  CUdeviceptr counter = ring->address(slot) + kMapBytes;
  if (counterParam >= 0)
    params[counterParam] = &counter;
  fa_status launched = launch(f, entry, grid, stream, params);
  // Recorded even when the launch failed: the slot's copy is in the stream.
  return cleanUpAfter(launched,
                      [&] { return ring->used(slot, stream, streamId); });
}

} // namespace fa::runtime
