//===- TensorMaps.cpp - Encode TMA tensor maps and launch with them ------===//
//
// Encoding a map is a host call and the kernel takes it by value, so a
// launch with maps is an ordinary launch: nothing is copied or allocated
// beside it, and a CUDA graph that captures it holds the maps in its kernel
// node. Each thread keeps its last 16 encodings by their arguments, so a
// launch on the same addresses as a recent one copies its maps.
//
//===----------------------------------------------------------------------===//

#include "TensorMaps.h"

#include <cstring>
#include <sstream>

using namespace fa::runtime;

namespace {

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

} // namespace

namespace fa::runtime {

fa_status encodeTensorMaps(const std::vector<fa_tensor_map_args> &args,
                           CUtensorMap *out) {
  // Enough for the maps of a forward and a backward on a few tensor sets.
  thread_local RecentTensorMaps<16> recent;
  for (size_t i = 0; i < args.size(); ++i) {
    const fa_tensor_map_args &m = args[i];
    if (const CUtensorMap *known = recent.find(m)) {
      out[i] = *known;
      continue;
    }
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
    recent.remember(m, out[i]);
  }
  return FA_SUCCESS;
}

fa_status launchWithMaps(const char *api, const std::string &tag,
                         const std::vector<fa_tensor_map_args> &mapArgs,
                         CUfunction f, const Entry &entry, const Grid &grid,
                         CUstream stream, void **params) {
  // cuLaunchKernel copies the parameters before it returns, so the maps
  // only need to outlive the call.
  alignas(64) CUtensorMap maps[FA_MAX_TENSOR_MAPS];
  if (fa_status s = encodeTensorMaps(mapArgs, maps))
    return failWithPrefix(s, std::string(api) + ": kernel '" + tag + "': ");
  for (size_t i = 0; i < mapArgs.size(); ++i)
    params[mapArgs[i].param] = &maps[i];
  return launch(f, entry, grid, stream, params);
}

} // namespace fa::runtime

fa_status fa::runtime::mapsOut(const char *api, const std::string &err,
                               const std::vector<fa_tensor_map_args> &maps,
                               fa_tensor_map_args out[FA_MAX_TENSOR_MAPS],
                               int32_t *count) {
  if (!err.empty())
    return fail(FA_ERROR_INVALID_ARGUMENT, std::string(api) + ": " + err);
  std::copy(maps.begin(), maps.end(), out);
  *count = static_cast<int32_t>(maps.size());
  return succeed();
}
