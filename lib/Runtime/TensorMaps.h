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

namespace fa::runtime {

/// Encodes `mapArgs` into `maps` (cuTensorMapEncodeTiled, a host call); the
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

} // namespace fa::runtime

#endif // FA_LIB_RUNTIME_TENSORMAPS_H
