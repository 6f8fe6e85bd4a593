//===- TensorMaps.h - TMA tensor maps in runtime memory ---------*- C++ -*-===//
//
// A kernel that loads by TMA takes pointers to its CUtensorMaps in device
// memory that the runtime owns: each context has a ring of slots, and a
// launch's maps go into a slot that already holds the same bytes or into one
// that no launch in flight reads.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_RUNTIME_TENSORMAPS_H
#define FA_LIB_RUNTIME_TENSORMAPS_H

#include "Driver.h"

#include <unordered_map>

namespace fa::runtime {

/// A slot holds the maps of one launch. `lastUse` is recorded after every
/// launch that reads the slot, on `stream`; a slot is rewritten only when
/// that event has completed, and it is read without a copy by a launch on
/// the same stream (ordered after the copy) or after it has completed.
struct MapSlot {
  CUtensorMap maps[FA_MAX_TENSOR_MAPS];
  size_t bytes = 0; // 0: holds nothing
  uint64_t hash = 0;
  CUevent lastUse = nullptr;
  unsigned long long stream = 0; // cuStreamGetId of lastUse's stream
};

/// The slots of one context, in one device allocation.
struct MapRing {
  CUcontext ctx = nullptr;
  CUdeviceptr base = 0;
  std::mutex mutex; // guards everything below; held across a launch
  std::vector<MapSlot> slots;
  std::unordered_map<uint64_t, int> index; // hash -> slot
  int next = 0; // where the search for a free slot starts

  /// Waits for the launches that read the slots, then frees them.
  ~MapRing();
  fa_status init(CUcontext context);
  CUdeviceptr address(int slot) const;
  /// The slot that holds `maps` for a launch on `stream`, copying them into
  /// a free one (in stream order) when none can be reused. Call with mutex
  /// held and call used() after the launch.
  fa_status acquire(const CUtensorMap *maps, size_t bytes, CUstream stream,
                    unsigned long long streamId, int &out);
  /// Marks `slot` as read by work just enqueued on `stream`.
  fa_status used(int slot, CUstream stream, unsigned long long streamId);

private:
  bool idle(const MapSlot &s) const;
  /// A slot no launch in flight reads, waiting for the oldest if need be.
  fa_status freeSlot(int &out);
};

/// A launch with tensor maps cannot be captured into a CUDA graph: the
/// captured kernel would keep reading a map slot that later launches reuse.
/// `api` names the C entry point in the error.
fa_status rejectCapture(const char *api, const KernelConfig &config,
                        CUstream stream);

/// Launches `f` (entry `entry` of `kernel`) with its tensor maps: encodes
/// `mapArgs`, puts them into a slot of the context's map ring (in stream
/// order) and points parameter mapArgs[i].param of `params` at map i; the
/// other parameters are the caller's. A persistent forward's tile counter,
/// which lives in the slot too, goes to parameter `counterParam` (if >= 0).
fa_status launchWithMaps(const fa_kernel &kernel, const char *api,
                         const std::vector<fa_tensor_map_args> &mapArgs,
                         CUcontext ctx, CUfunction f, const Entry &entry,
                         const Grid &grid, CUstream stream, void **params,
                         int counterParam = -1);

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_TENSORMAPS_H
