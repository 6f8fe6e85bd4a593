//===- TensorMaps.h - TMA tensor maps as kernel parameters ------*- C++ -*-===//
//
// A kernel that loads by TMA takes its CUtensorMaps by value, as 128-byte
// __grid_constant__ parameters: the launch copies them into the kernel's
// parameter space, so no launch needs device memory of its own and every
// launch can be captured into a CUDA graph.
//
//===----------------------------------------------------------------------===//

#ifndef FA_LIB_RUNTIME_TENSORMAPS_H
#define FA_LIB_RUNTIME_TENSORMAPS_H

#include "Driver.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace fa::runtime {

/// Whether two sets of cuTensorMapEncodeTiled arguments are the same (the
/// map's tensor and parameter included).
inline bool sameMapArgs(const fa_tensor_map_args &a,
                        const fa_tensor_map_args &b) {
  auto same = [](const auto &x, const auto &y) {
    return std::equal(std::begin(x), std::end(x), std::begin(y));
  };
  return std::strcmp(a.tensor, b.tensor) == 0 && a.param == b.param &&
         a.data_type == b.data_type && a.rank == b.rank &&
         a.global_address == b.global_address &&
         same(a.global_dim, b.global_dim) &&
         same(a.global_strides, b.global_strides) &&
         same(a.box_dim, b.box_dim) &&
         same(a.element_strides, b.element_strides) &&
         a.interleave == b.interleave && a.swizzle == b.swizzle &&
         a.l2_promotion == b.l2_promotion && a.oob_fill == b.oob_fill;
}

/// The last `N` maps one thread encoded, by their arguments: an encoding is
/// a pure function of them, and a training loop or a benchmark launches on
/// the same addresses again and again (PyTorch's allocator hands the same
/// blocks back), so most launches copy their maps instead of encoding them.
/// One per thread: no locking.
template <size_t N> class RecentTensorMaps {
public:
  /// The map encoded for `args`, or null.
  const CUtensorMap *find(const fa_tensor_map_args &args) const {
    for (size_t i = 0; i < used; ++i)
      if (sameMapArgs(entries[i].args, args))
        return &entries[i].map;
    return nullptr;
  }
  /// Keeps `map` as the encoding of `args`, replacing the oldest entry.
  void remember(const fa_tensor_map_args &args, const CUtensorMap &map) {
    Entry &e = entries[next];
    e.args = args;
    e.map = map;
    next = (next + 1) % N;
    used = std::min(used + 1, N);
  }

private:
  struct Entry {
    fa_tensor_map_args args;
    CUtensorMap map;
  };
  std::array<Entry, N> entries{};
  size_t next = 0, used = 0;
};

/// Encodes `mapArgs` into `maps` (cuTensorMapEncodeTiled, a host call, or
/// a copy of the calling thread's encoding of the same arguments); the
/// error names the map, its parameter and every encode argument.
fa_status encodeTensorMaps(const std::vector<fa_tensor_map_args> &mapArgs,
                           CUtensorMap *maps);

/// Launches `f` (entry `entry`) with its tensor maps: encodes `mapArgs` and
/// points parameter mapArgs[i].param of `params` at map i, passed by value;
/// the other parameters are the caller's. `api` names the C entry point and
/// `tag` the kernel in an encode error.
fa_status launchWithMaps(const char *api, const std::string &tag,
                         const std::vector<fa_tensor_map_args> &mapArgs,
                         CUfunction f, const Entry &entry, const Grid &grid,
                         CUstream stream, void **params);

/// The answer of a `_tensor_maps` C entry: `err` (non-empty) as its error,
/// else `maps` copied into `out` and their number into *count.
fa_status mapsOut(const char *api, const std::string &err,
                  const std::vector<fa_tensor_map_args> &maps,
                  fa_tensor_map_args out[FA_MAX_TENSOR_MAPS], int32_t *count);

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_TENSORMAPS_H
